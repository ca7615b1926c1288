"""Mends from the review of the day's change (c92303f..): each test failed before its fix.

1. the loader state (``/run/mltcp/state.json``) survives concurrent writers: it is replaced
   whole (a temporary file renamed over it), every read-modify-write holds an ``flock`` on
   ``state.lock`` beside it, and a job name already recorded is not written again;
2. ``mltcp mark`` prints the bare count again, and a name it cannot record is a warning;
3. the ``cassini.io/profile`` annotation takes ``provenance`` (an object), as a JOB does;
4. ``cassini profile --dt-s`` below :data:`cassini.agent.MIN_PERIOD_S` exits 2 naming
   it; ``--src-ip`` is checked once and named once;
5. a new ``cassini serve --state`` file is made 0644, whatever the umask;
6. deploy/README.md says what the code does: the lowest link score, readiness kept after
   the first model;
7. a bound's error never reads ``must be <= 604800, got 604800``;
8. a pcapng capture with an interface of an unsupported link type is read when the
   source's packets are on a supported one;
9. one pluralising helper for the kube modules.
"""

from __future__ import annotations

import dataclasses
import fcntl
import importlib
import inspect
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require, require_module
from test_mltcp_cli import FakeKernel, fake_kernel, mltcp

from cassini.errors import InputError
from mltcp import marks
from mltcp.admin import cgroup, register, state

ROOT = Path(__file__).resolve().parent.parent
FORK = multiprocessing.get_context("fork")
RACE_STATE = state.LoaderState(
    allowed_before=("reno", "cubic"), default_before="cubic", loaded=("mltcp_reno",)
)


@pytest.fixture
def state_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The loader state in ``tmp_path`` (as tests/test_mltcp_cli.py redirects it)."""
    path = tmp_path / "state.json"
    monkeypatch.setattr(state, "STATE", path)
    monkeypatch.setattr(register, "STATE", path)
    return path


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    monkeypatch.setattr(marks, "_marks", None)  # opened afresh, in this fake kernel
    yield fake_kernel(tmp_path, monkeypatch)
    marks._marks = None


# -- 1. the loader state under concurrent writers ------------------------------------------
def _writer(i: int, n: int) -> None:
    for k in range(n):
        state.remember_job(f"job-{i}-{k}")


def _reader(n: int) -> None:
    """Exit 1 when a read finds the state without what ``load`` recorded (half-written)."""
    for _ in range(n):
        if state.read_state().loaded != RACE_STATE.loaded:
            sys.exit(1)


def _forgetter(n: int) -> None:
    for _ in range(n):
        cgroup.forget_removed_cgroups()


def test_concurrent_writers_keep_the_loader_state(state_file, tmp_path):
    """The reviewer's race (/tmp/rev65/race.py): ``mark`` in four processes wiped what
    ``load`` recorded (3 runs of 3), so ``unload`` could not put the host back."""
    live, removed = tmp_path / "cg-live", tmp_path / "cg-removed"
    live.mkdir()
    cgroups = (str(live), str(removed))
    state.save_state(dataclasses.replace(RACE_STATE, cgroups=cgroups))
    procs = [FORK.Process(target=_writer, args=(i, 50)) for i in range(4)]
    procs += [FORK.Process(target=_reader, args=(400,))]
    procs += [FORK.Process(target=_forgetter, args=(50,))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * len(procs)  # the reader: no half a file
    after = state.read_state()
    assert (after.allowed_before, after.default_before, after.loaded) == (
        RACE_STATE.allowed_before,
        RACE_STATE.default_before,
        RACE_STATE.loaded,
    )
    assert after.cgroups == (str(live),)
    assert len(after.jobs) == 4 * 50  # no write lost
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_reader_of_the_old_file_reads_it_whole(state_file):
    state.save_state(RACE_STATE)
    with open(state_file) as old:
        state.save_state(state.LoaderState())  # written while it reads
        assert json.loads(old.read())["loaded"] == ["mltcp_reno"]
    assert state.read_state() == state.LoaderState()
    assert state_file.stat().st_mode & 0o777 == 0o644


def test_a_recorded_job_name_is_not_written_again(state_file, monkeypatch):
    writes = []
    save = state.save_state
    monkeypatch.setattr(state, "save_state", lambda s: (writes.append(s), save(s)))
    for job in ("a", "b", "a", "b", "a"):  # mark, at every iteration of two jobs
        state.remember_job(job)
    assert len(writes) == 2
    assert list(state.read_state().job_names().values()) == ["a", "b"]


def _remember_and_say(job: str, done) -> None:
    state.remember_job(job)
    done.set()


def test_the_lock_makes_another_process_wait(state_file):
    done = FORK.Event()
    with state.locked():
        child = FORK.Process(target=_remember_and_say, args=("later", done))
        child.start()
        assert not done.wait(0.5)  # it waits for the lock
        with state.locked():  # nested in one process: no deadlock
            pass
    assert done.wait(10)
    child.join(10)
    assert state.read_state().job_names() == {marks.job_key("later"): "later"}
    assert (state_file.parent / state.LOCK_NAME).exists()


def lock_held(state_file: Path) -> bool:
    """Does someone hold the state's flock (this process's other descriptor counts)?"""
    fd = os.open(state_file.with_name(state.LOCK_NAME), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_every_read_modify_write_holds_the_lock(kernel, capsys, monkeypatch, tmp_path):
    """load, select, mark, assign-port, forgetting cgroups and unload: each write of the
    state (and unload's restoring) happens under the lock."""
    path = state.STATE
    seen: list[bool] = []
    save = state.save_state

    def checked_save(s: state.LoaderState) -> None:
        seen.append(lock_held(path))
        save(s)

    for module in (state, cgroup, register):
        monkeypatch.setattr(module, "save_state", checked_save)
    unselect = register.unselect_cgroups
    monkeypatch.setattr(
        register, "unselect_cgroups", lambda s: (seen.append(lock_held(path)), unselect(s))[1]
    )
    kernel.add_netns("ns1")
    assert mltcp(capsys, "load")[0] == 0
    assert mltcp(capsys, "select", "mltcp_reno", "--netns", "ns1")[0] == 0
    assert mltcp(capsys, "mark", "trainer-a")[0] == 0
    assert mltcp(capsys, "assign-port", "7000", "trainer-b")[0] == 0
    here, gone = tmp_path, tmp_path / "removed"
    state.save_state(dataclasses.replace(state.read_state(), cgroups=(str(here), str(gone))))
    assert cgroup.forget_removed_cgroups() == [str(gone)]
    monkeypatch.setattr(cgroup, "_detach", lambda cg: None)
    assert cgroup.forget_cgroup(here) is True
    assert mltcp(capsys, "unload")[0] == 0
    assert len(seen) == 8 and all(seen[:4]) and all(seen[5:]), seen  # [4]: the test's own
    assert not lock_held(path)


# -- 2. mltcp mark's output ------------------------------------------------------------------
def test_mark_prints_the_bare_count(kernel, capsys):
    """Scripts read it: ``n=$(mltcp mark job)``; the words are in its help."""
    assert mltcp(capsys, "load")[0] == 0
    assert mltcp(capsys, "mark", "trainer-a") == (0, "1\n", "")
    assert mltcp(capsys, "mark", "trainer-a") == (0, "2\n", "")
    assert "bare number" in mltcp_help("mark")


def mltcp_help(command: str) -> str:
    from mltcp import cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[command].format_help()


@pytest.mark.parametrize("broken", ["malformed", "unwritable"])
@pytest.mark.parametrize("command", [["mark", "job-x"], ["assign-port", "7000", "job-x"]])
def test_a_name_not_recorded_is_a_warning_not_a_failure(
    kernel, capsys, monkeypatch, tmp_path, broken, command
):
    """The mark (the port) was applied in the kernel: exit 0, a warning on stderr."""
    assert mltcp(capsys, "load")[0] == 0
    if broken == "malformed":
        state.STATE.write_text('{"jobs": {"x": "a"}}')
    else:
        (tmp_path / "a-file").write_text("")
        monkeypatch.setattr(state, "STATE", tmp_path / "a-file" / "state.json")
    code, out, err = mltcp(capsys, *command)
    assert code == 0 and out == ("1\n" if command[0] == "mark" else "")
    assert err.count("\n") == 1 and err.startswith("mltcp: warning: job job-x's name not")


# -- 1, 2 in the running kernel (root) --------------------------------------------------------
@pytest.fixture(scope="module")
def host():
    require(os.geteuid() == 0, "root")
    require(Path("/sys/kernel/btf/vmlinux").exists(), "kernel BTF")
    for tool in ("clang", "bpftool"):
        require(shutil.which(tool) is not None, f"{tool} (run make setup)")
    from helpers.mltcp_flows import take_mltcp

    from mltcp import admin

    take_mltcp()  # a clean start; never another user's sockets
    yield admin
    admin.unload()


def mltcp_process(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mltcp.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


@pytest.mark.root
def test_root_concurrent_marks_print_counts_and_unload_puts_the_host_back(host):
    sysctl = Path("/proc/sys/net/ipv4")
    before = {n: (sysctl / n).read_text() for n in ("tcp_congestion_control",
                                                     "tcp_allowed_congestion_control")}  # fmt: skip
    host.load("reno")
    jobs = [f"review-mends-{i}" for i in range(6)]
    procs = [mltcp_process("mark", job) for job in jobs] + [mltcp_process("status")]
    procs += [mltcp_process("assign-port", str(47000 + i), job) for i, job in enumerate(jobs)]
    results = [(p.args[3], *p.communicate(timeout=120), p.returncode) for p in procs]
    for command, _, err, code in results:
        assert code == 0, (command, err)
    assert [out for command, out, _, _ in results if command == "mark"] == ["1\n"] * len(jobs)
    recorded = host.read_state()
    assert recorded.loaded == ("mltcp_reno",) and recorded.default_before is not None
    assert set(jobs) <= set(recorded.job_names().values())
    host.unload()
    assert {n: (sysctl / n).read_text() for n in before} == before
    assert not host.STATE.exists()


# -- 3. the profile annotation's provenance --------------------------------------------------
def annotation_profile(obj: dict, job_label: str | None = None):
    from cassini.service import k8s

    labels = {"cassini.io/job": job_label} if job_label else {}
    ann = {k8s.ANNOTATION_PROFILE: json.dumps(obj)}
    return k8s.pod_profile(k8s.ExtenderArgs("p-0", ann, (), None, labels), {})


PHASES = [{"start_s": 0.0, "duration_s": 0.05, "rate_bps": 1e9}]
ANNOTATION = 'Pod.metadata.annotations["cassini.io/profile"]'


def test_the_profile_annotation_takes_provenance_as_a_job_file_has_it():
    """What ``cassini profile --nic-bps`` writes goes into the annotation as it is."""
    provenance = {"nic_bps": 1e11, "source": "cassini profile --from pcap"}
    written = {"id": "bert", "iteration_time_s": 0.1, "phases": PHASES, "provenance": provenance}
    p = annotation_profile(written)
    assert (p.job_id, p.iteration_time_s) == ("bert", 0.1)
    assert annotation_profile(written, job_label="from-label").job_id == "from-label"
    for bad, field, words in [
        ({"provenance": "nic 100G"}, f"{ANNOTATION}.provenance", "must be a JSON object"),
        ({"id": ""}, f"{ANNOTATION}.id", "must not be empty"),
        ({"source": "x"}, f"{ANNOTATION}.source", "unknown field"),
    ]:
        with pytest.raises(InputError) as e:
            annotation_profile(written | bad, job_label="from-label")
        assert (e.value.field, words in e.value.problem) == (field, True), e.value


# -- 4. cassini profile --dt-s and --src-ip ---------------------------------------------------
def profile_run(capsys, *argv: str) -> tuple[int, str]:
    from cassini.cli import main

    code = main(["profile", "--from", "pcap", *argv])
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return code, err.strip()


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    require_module("scapy", "the testbed extra: writes the capture")
    from test_profile_inputs import ETHERNET, bursts, ip_packet, write_pcap

    path = tmp_path / "c.pcap"
    write_pcap(path, [(t, ETHERNET + ip_packet(1448)) for t in bursts(0.1, 10, 40, 1e-4)])
    return path


@pytest.mark.parametrize("dt", ["5e-7", "9.99e-7"])
def test_dt_s_below_the_shortest_phase_exits_2_naming_it(capsys, capture, tmp_path, dt):
    """A bin under 1 us wrote a profile every reader refuses (phases of 5e-7 s)."""
    out = tmp_path / "p.json"
    code, line = profile_run(capsys, str(capture), "--src-ip", "10.0.0.1", "--dt-s", dt,
                             "--out", str(out))  # fmt: skip
    assert code == 2 and line.startswith("cassini: error: --dt-s: must be >= 1e-06 s"), line
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--src-ip", "10.0.0"], "not an IPv4 address in dotted-quad form (a.b.c.d): '10.0.0'"),
        ([], "missing: required with --from pcap"),
        (["--src-ip", "10.0.0.7"], "no IPv4 packets from 10.0.0.7"),
    ],
)
def test_src_ip_is_checked_once_and_named_once(capsys, capture, argv, words):
    code, line = profile_run(capsys, str(capture), *argv)
    assert code == 2 and line.startswith(f"cassini: error: --src-ip: {words}"), line
    line = line.replace(str(capture), "CAPTURE")
    assert "src_ip" not in line and line.count("--src-ip") == 1, line
    cli_source = inspect.getsource(importlib.import_module("cassini.cli")._profile_pcap)
    assert "ipaddress" not in cli_source  # the one check is measure's


# -- 5. the state file's mode ----------------------------------------------------------------
def test_a_new_state_file_is_0644_under_umask_0(tmp_path):
    from cassini.service.store import Store

    old = os.umask(0)
    try:
        store = Store(str(tmp_path / "state.db"), default_epoch_s=0.0)
    finally:
        os.umask(old)
    try:
        assert (tmp_path / "state.db").stat().st_mode & 0o777 == 0o644
    finally:
        store.close()


# -- 6. deploy/README.md says what the code does ----------------------------------------------
def test_deploy_readme_says_lowest_score_and_readiness_as_the_code_has_them():
    from cassini.service.kube.service_hook import KubeRunning

    text = " ".join((ROOT / "deploy" / "README.md").read_text().split())
    assert "mean compatibility" not in text and "lowest compatibility" in text
    assert "while the API server cannot be reached" not in text
    assert "It stays ready after that" in text and "keeps scoring with the last model" in text
    service = " ".join((ROOT / "docs" / "service.md").read_text().split())
    assert "Once a model is applied the pod stays ready" in service

    class Watch:
        name, last_error = "nodes", "GET /api/v1/nodes: connection refused"

    class Sync:
        watches = [Watch()]

    running = KubeRunning(sync=Sync())
    assert "connection refused" in running.not_ready()
    running.applied = True  # a model was applied; the API server went away later
    assert running.not_ready() is None


# -- 7. a bound's error ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, words",
    [
        (604800.0001, "must be <= 604800, got 604800.0001"),
        (9.999999e-7, "must be >= 1e-06, got 9.999999e-07"),
        (1e9, "must be <= 604800, got 1e+09"),
    ],
)
def test_a_bound_error_never_shows_the_bound_as_the_value(value, words):
    from cassini.service import models
    from cassini.service.errors import BadRequest

    with pytest.raises(BadRequest) as e:
        models.validate(models.ProfileAnnotation, {"iteration_time_s": value, "phases": []})
    assert e.value.message == words


# -- 8. pcapng with an interface of an unsupported link type ----------------------------------
def test_an_unsupported_interface_is_skipped_when_the_source_is_on_a_supported_one(tmp_path):
    require_module("scapy", "the testbed extra: writes the capture")
    from test_profile_inputs import ETHERNET, SRC, ip_packet, write_pcapng

    from cassini.measure import pcap_packets

    usb = 189  # LINKTYPE_USB_LINUX: no IP behind a fixed header
    frame = ip_packet(100)
    both = tmp_path / "both.pcapng"
    write_pcapng(both, [(1, None), (usb, None)], [
        (0, 1000.25, ETHERNET + frame), (1, 1000.5, b"\x00" * 64 + frame),
        (0, 1000.75, ETHERNET + frame),
    ])  # fmt: skip
    stamps, sizes = pcap_packets(both, SRC)
    assert stamps.tolist() == pytest.approx([1000.25, 1000.75])
    assert sizes.tolist() == [len(frame)] * 2
    elsewhere = tmp_path / "elsewhere.pcapng"  # the source only on the unsupported one
    write_pcapng(elsewhere, [(1, None), (usb, None)], [
        (0, 1000.25, ETHERNET + ip_packet(100, src="10.0.0.9")), (1, 1000.5, b"\x00" * 64),
    ])  # fmt: skip
    with pytest.raises(InputError, match=rf"{re.escape(str(elsewhere))}: link type {usb} "):
        pcap_packets(elsewhere, SRC)


# -- 9. one pluralising helper ------------------------------------------------------------------
def test_the_kube_modules_share_one_pluralising_helper():
    """One helper, ``cassini.schema.counted`` since 2026-11-29 (the PAI reader's notes
    use it too; it had grown a twin there)."""
    from cassini import schema
    from cassini.service.kube import cli, render, topology
    from cassini.sim.traces import pai2020

    for module in (cli, render, topology, pai2020):
        source = inspect.getsource(module)
        assert not re.search(r"^def (_count|counted|plural)\(", source, re.M), module
    assert topology.counted is render.counted is pai2020.counted is schema.counted
    assert "from cassini.schema import counted" in inspect.getsource(cli)
    assert [render.counted(n, w) for n, w in ((1, "node"), (2, "shared switch"))] == [
        "1 node",
        "2 shared switches",
    ]
