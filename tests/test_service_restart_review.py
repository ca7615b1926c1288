"""The review of ``cassini serve`` restarts (2026-11-29): a state file whose epoch is in
milliseconds was served, and so were explicit time-shift rows no check read back; an
empty ``--audit-log`` was a traceback and an empty ``--state`` the shared default file;
the 429 of ``--max-jobs`` did not name the limit, a state file missing one of cassini's
tables was described as having "tables none of its tables", an empty ``--cluster`` was
not named, and a token given twice under two names was taken (the audit named the
first).

The command-line tests run ``cassini serve`` in this process with :func:`listen` made to
fail: every refusal here comes before the port is opened, so a service that would have
started fails the test at once rather than serving."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.service_util import HALF, call, error_of, ok_json, pair, start, two_node_cluster

from cassini.cli import main
from cassini.errors import InputError
from cassini.service import cli as service_cli
from cassini.service.auth import read_token_file
from cassini.service.cli import ServiceThread
from cassini.service.shifts import JobShift
from cassini.service.store import StateError, Store

TOKEN_A = "a" * 24
TOKEN_B = "b" * 24


@pytest.fixture
def no_listening(monkeypatch, tmp_path):
    """``cassini serve`` may not open its port; the default state file is under tmp_path."""

    def refuse(host: str, port: int):
        raise AssertionError("cassini serve got as far as opening its port")

    monkeypatch.setattr(service_cli, "listen", refuse)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))


def serve_refused(capsys, *args: str) -> str:
    """``cassini serve ARGS`` exits 2 with one line on standard error: that line."""
    assert main(["serve", "--port", "0", "--insecure-writes", *args]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[ServiceThread]:
    """The service of :func:`start` (its log kept quiet unless ``log`` is given), stopped
    after the block: the state file is given up for the next one."""
    kwargs.setdefault("log", [].append)
    srv = start(**kwargs)
    try:
        yield srv
    finally:
        srv.stop()


def job(job_id: str, nodes: list[str] | None = None) -> dict:
    return {"id": job_id, "iteration_time_s": 0.1, "phases": HALF, "nodes": nodes or []}


# -- 1. the epoch and the explicit shifts of a state file ---------------------------------


def test_a_state_file_whose_epoch_is_in_milliseconds_exits_2(tmp_path, capsys, no_listening):
    path = tmp_path / "s.db"
    Store(str(path), default_epoch_s=1767225600.0).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '1767225600000' WHERE key = 'epoch_s'")
    line = serve_refused(capsys, "--state", str(path))
    assert line.startswith(f"cassini: error: --state {path}: meta.epoch_s"), line
    assert "'1767225600000'" in line and "seconds, not milliseconds" in line


def stored_shift(tmp_path, update: str) -> Store:
    """A state file holding job a's explicit shift, then ``update`` run on it; reopened."""
    path = tmp_path / "s.db"
    store = Store(str(path), default_epoch_s=1767225600.0)
    store.set_shift(JobShift("a", True, 0.01, 0.1, None, None, 1767225600.0))
    store.set_shift(JobShift("r", False, 0.0, 0.1, "released by PUT"))
    store.close()
    with sqlite3.connect(path) as db:
        db.execute(update)
    return Store(str(path), default_epoch_s=1.0)


@pytest.mark.parametrize(
    "column, value, words",
    [
        ("epoch_s", 1767225600000, "not milliseconds"),
        ("epoch_s", -5, "epoch_s must be >= 0"),
        ("epoch_s", "soon", "epoch_s must be a number of UNIX seconds, got 'soon'"),
        ("shift_s", 0.1, "shift_s must be in [0, period_s = 0.1), got '0.1'"),
        ("shift_s", -0.01, "shift_s must be in [0, period_s"),
        ("shift_s", "x", "shift_s must be in [0, period_s"),
        ("period_s", 0, "period_s must be in [1e-06, 604800] seconds"),
        ("shift", 7, "shift must be 0 or 1, got '7'"),
    ],
)
def test_a_stored_shift_row_that_breaks_the_put_rules_is_reported(tmp_path, column, value,
                                                                  words):
    update = f"UPDATE shifts SET {column} = {value!r} WHERE job_id = 'a'"
    store = stored_shift(tmp_path, update)
    try:
        shifts = store.shifts()
    finally:
        store.close()
    assert [s.job_id for s in shifts.shifts] == ["r"]  # the release still reads
    assert list(shifts.unreadable) == ["a"]
    assert shifts.unreadable["a"].startswith("stored time-shift unreadable: ")
    assert words in shifts.unreadable["a"], shifts.unreadable["a"]


def test_sound_stored_shifts_read_back_as_written(tmp_path):
    store = stored_shift(tmp_path, "SELECT 1")
    try:
        shifts = store.shifts()
    finally:
        store.close()
    assert shifts.unreadable == {}
    assert shifts.shifts == [
        JobShift("a", True, 0.01, 0.1, None, None, 1767225600.0),
        JobShift("r", False, 0.0, 0.1, "released by PUT"),
    ]


def test_a_job_whose_stored_shift_is_in_milliseconds_is_kept_unused_until_put(tmp_path):
    """Served, the row gave slots 1.8e12 s from now; it is now reported like a corrupt
    job row (unusable, shift: false with the reason), and a PUT replaces it."""
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(two_node_cluster()))
    state = str(tmp_path / "s.db")
    conf = {"cluster_file": str(cluster), "state_path": state, "workers": 1, "quiet": True}
    put = {"shift_s": 0.01, "period_s": 0.1, "epoch_s": 1767225600.0}
    with running(**conf) as srv:
        ok_json(call(srv.port, "POST", "/v1/jobs", job("a", pair("n1"))), 201)
        ok_json(call(srv.port, "PUT", "/v1/jobs/a/time_shift", put))
    with sqlite3.connect(state) as db:
        db.execute("UPDATE shifts SET epoch_s = 1767225600000 WHERE job_id = 'a'")
    logged: list[str] = []
    with running(**conf, log=logged.append) as srv:
        (entry,) = ok_json(call(srv.port, "GET", "/healthz"))["unusable_jobs"]
        assert entry["id"] == "a" and "stored time-shift unreadable: epoch_s" in entry["reason"]
        shift = ok_json(call(srv.port, "GET", "/v1/jobs/a/time_shift"))
        assert shift["shift"] is False and "stored time-shift unreadable" in shift["reason"]
        assert shift["epoch_s"] < 1e10 and shift["period_s"] == 0.1
        assert any("job a: kept in the state file, not used" in x for x in logged), logged
        held = ok_json(call(srv.port, "PUT", "/v1/jobs/a/time_shift", put))
        assert held["shift"] is True and held["epoch_s"] == 1767225600.0
        assert ok_json(call(srv.port, "GET", "/healthz"))["unusable_jobs"] == []
    with sqlite3.connect(state) as db:
        assert db.execute("SELECT epoch_s FROM shifts").fetchall() == [(1767225600.0,)]


# -- 2, 3, 4c. empty paths -----------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--audit-log", "--state", "--cluster", "--token-file"])
def test_an_empty_path_exits_2_naming_its_flag(tmp_path, capsys, no_listening, flag):
    """``--audit-log ""`` was a FileNotFoundError traceback, ``--state ""`` silently the
    shared default file, ``--cluster ""`` a line naming no path."""
    args = [flag, ""] if flag == "--state" else ["--state", ":memory:", flag, ""]
    line = serve_refused(capsys, *args)
    assert line == f"cassini: error: {flag}: empty path, expected a file name"
    assert not (tmp_path / "xdg").exists()  # the default state file was not made


# -- 4a, 4b. the --max-jobs answer and a state file missing a table -------------------------


def test_the_max_jobs_answer_names_the_limit_after_a_restart_below_the_count(tmp_path):
    state = str(tmp_path / "s.db")
    with running(state_path=state, workers=1, quiet=True, max_jobs=10) as srv:
        for i in range(3):
            ok_json(call(srv.port, "POST", "/v1/jobs", job(f"j{i}")), 201)
    with running(state_path=state, workers=1, quiet=True, max_jobs=2) as srv:
        err = error_of(call(srv.port, "POST", "/v1/jobs", job("new")))
        assert err["code"] == 429 and err["field"] == "id"
        assert err["message"] == (
            "the registry holds 3 jobs, the limit is 2 (--max-jobs); remove 2 first"
        )
        ok_json(call(srv.port, "POST", "/v1/jobs", job("j0")), 200)  # a replacement is not new


@pytest.mark.parametrize(
    "version, tables, words",
    [
        (1, ("meta", "jobs"), "schema version 1 without its tables shifts"),
        (0, ("meta",), "tables meta but schema version 0"),
    ],
)
def test_a_state_file_missing_a_cassini_table_says_which(tmp_path, version, tables, words):
    path = tmp_path / "s.db"
    with sqlite3.connect(path) as db:
        for name in tables:
            db.execute(f"CREATE TABLE {name} (x TEXT)")
        db.execute(f"PRAGMA user_version = {version}")
    with pytest.raises(StateError) as e:
        Store(str(path), default_epoch_s=1.0)
    assert str(e.value) == (
        f"{path}: not a cassini state file ({words}); give another --state file"
    )


# -- 4d. one token under two names -----------------------------------------------------------


def test_a_token_given_twice_under_two_names_is_refused(tmp_path, capsys, no_listening):
    path = tmp_path / "tokens"
    path.write_text(f"{TOKEN_A} sched\n{TOKEN_B} agent\n# again\n{TOKEN_A} other\n")
    with pytest.raises(InputError) as e:
        read_token_file(path)
    assert str(e.value) == (
        "token-file line 4: the token of line 1 ('sched') again, named 'other': give each "
        "token one name"
    )
    line = serve_refused(capsys, "--state", ":memory:", "--token-file", str(path))
    assert line.startswith(f"cassini: error: --token-file {path}: token-file line 4")
    assert "'sched'" in line and "'other'" in line and TOKEN_A not in line
