"""What a testbed run leaves behind and says: its jobs' cgroups removed on teardown, even
when the run was interrupted with workers still in them (the kernel's cgroup v2 faked
here: a killed process takes a moment to exit, and ``rmdir`` fails EBUSY until then;
one root test on the real kernel), ``testbed cleanup`` removing those of dead runs, the
MLTCP it loads said to stay loaded, the progress and table it prints, ``python -m
testbed``; and experiment 2's model summary against its results.json."""

from __future__ import annotations

import errno
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import require, require_root, run_name

EXIT_S = 0.3  # how long a killed fake process takes to exit (seconds)


class FakeCgroupFS:
    """cgroup v2 as :mod:`testbed.cgroups` sees it, mounted at ``root`` (a folder under
    tmp_path): each cgroup's processes (``add``) exit :data:`EXIT_S` after a SIGKILL
    (``never`` ones never do), and ``rmdir`` fails EBUSY while any is left."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        from testbed import cgroups

        self.root = root
        root.mkdir(exist_ok=True)
        self.members: dict[Path, set[int]] = {}
        self.exits_at: dict[int, float] = {}
        self.never: set[int] = set()
        self.killed: list[int] = []
        monkeypatch.setattr(cgroups, "cgroup2_mounts", lambda: [root])
        monkeypatch.setattr(cgroups, "_pids", self.pids)
        monkeypatch.setattr(cgroups, "_kill", self.kill)
        monkeypatch.setattr(cgroups, "_rmdir", self.rmdir)

    def make(self, name: str, *pids: int) -> Path:
        path = self.root / name
        path.mkdir()
        self.add(path, *pids)
        return path

    def add(self, path: Path, *pids: int) -> None:
        self.members.setdefault(path, set()).update(pids)

    def pids(self, path: Path) -> list[int]:
        now = time.monotonic()
        return sorted(p for p in self.members.get(path, ()) if self.exits_at.get(p, 1e18) > now)

    def kill(self, pid: int) -> None:
        self.killed.append(pid)
        if pid not in self.never:
            self.exits_at.setdefault(pid, time.monotonic() + EXIT_S)

    def rmdir(self, path: Path) -> None:
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        if self.pids(path):
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        shutil.rmtree(path)
        self.members.pop(path, None)


@pytest.fixture
def cgfs(monkeypatch, tmp_path) -> FakeCgroupFS:
    return FakeCgroupFS(monkeypatch, tmp_path / "cgroup2")


# -- item 1: the jobs' cgroups go on teardown, and with `testbed cleanup` ---------------
def test_remove_waits_for_the_killed_processes_before_rmdir(cgfs):
    """kill -9 then rmdir at once failed EBUSY (the processes had not exited yet), the
    error was ignored and the cgroup stayed, its program attached."""
    from testbed import cgroups

    path = cgfs.make("testbed-mltcp-1-a", 901, 902)
    said: list[str] = []
    assert cgroups.remove(path, say=said.append) is True
    assert not path.exists() and sorted(set(cgfs.killed)) == [901, 902] and said == []
    assert cgroups.remove(path, say=said.append) is True and said == []  # gone already


def test_remove_gives_up_after_its_wait_in_one_line_naming_the_cgroup(cgfs):
    from testbed import cgroups

    path = cgfs.make("testbed-prio-1-b", 903)
    cgfs.never.add(903)  # e.g. stuck in the kernel
    said: list[str] = []
    t0 = time.monotonic()
    assert cgroups.remove(path, wait_s=0.2, say=said.append) is False
    assert 0.2 <= time.monotonic() - t0 < 2 and path.exists()
    assert len(said) == 1 and "\n" not in said[0], said
    assert str(path) in said[0] and "`testbed cleanup`" in said[0] and "0.2 s" in said[0]


def test_mltcp_job_cgroups_are_removed_on_exit_with_their_processes_still_running(
    cgfs, monkeypatch, capsys
):
    """Ctrl-C of `testbed run` with an mltcp scheme left testbed-mltcp-<pid>-{a,b}."""
    from mltcp import admin
    from mltcp.policy import MltcpOptions, MltcpParams
    from testbed import mltcp_jobs

    selected, params, forgotten = [], [], []
    monkeypatch.setattr(admin, "get_params", lambda: MltcpParams())
    monkeypatch.setattr(admin, "set_params", params.append)
    monkeypatch.setattr(admin, "select", lambda cc, cgroup, job: selected.append(cgroup))
    monkeypatch.setattr(admin, "forget_cgroup", forgotten.append)
    tags = {"a": "a@run", "b": "b@run"}
    cgroups = mltcp_jobs.job_cgroups("mltcp_reno", tags, MltcpOptions())
    with pytest.raises(KeyboardInterrupt), cgroups as paths:  # interrupted while they run
        assert sorted(paths) == ["a", "b"] and {p.parent for p in paths.values()} == {cgfs.root}
        cgfs.add(paths["a"], 911, 912)
        cgfs.add(paths["b"], 913)
        raise KeyboardInterrupt
    assert list(cgfs.root.iterdir()) == [] and sorted(set(cgfs.killed)) == [911, 912, 913]
    assert selected == list(paths.values()) and params[-1] == MltcpParams()  # put back
    assert forgotten == selected  # nor a record in MLTCP's state (`mltcp status`)
    assert capsys.readouterr().err == ""


def test_a_cgroup_mltcp_cannot_forget_is_still_removed_and_said_in_one_line(
    cgfs, monkeypatch, capsys
):
    from mltcp import admin
    from mltcp.pinned import MltcpError
    from mltcp.policy import MltcpOptions, MltcpParams
    from testbed import mltcp_jobs

    def forget(path):
        raise MltcpError("/run/mltcp/state.json: cgroups must be a list of strings")

    monkeypatch.setattr(admin, "get_params", lambda: MltcpParams())
    monkeypatch.setattr(admin, "set_params", lambda params: None)
    monkeypatch.setattr(admin, "select", lambda cc, cgroup, job: None)
    monkeypatch.setattr(admin, "forget_cgroup", forget)
    with mltcp_jobs.job_cgroups("mltcp_reno", {"a": "a@run"}, MltcpOptions()) as paths:
        cgfs.add(paths["a"], 951)
    assert list(cgfs.root.iterdir()) == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"forget_cgroup {paths['a']}: /run/mltcp" in err, err


class SecondInterrupt(Exception):
    """What SIGINT raises in the test below (not KeyboardInterrupt: were it let through,
    it would stop the test session)."""


def test_a_second_interrupt_does_not_cut_the_cgroups_teardown_short(cgfs, monkeypatch):
    """A second Ctrl-C (or the SIGINT `timeout` sends its process group after the one to
    its child) while the first cgroup was waited for stopped the teardown: both stayed."""
    from mltcp import admin
    from mltcp.policy import MltcpOptions, MltcpParams
    from testbed import cgroups, mltcp_jobs

    monkeypatch.setattr(admin, "get_params", lambda: MltcpParams())
    monkeypatch.setattr(admin, "set_params", lambda params: None)
    monkeypatch.setattr(admin, "select", lambda cc, cgroup, job: None)
    monkeypatch.setattr(admin, "forget_cgroup", lambda path: True)
    interrupted: list[int] = []

    def kill(pid: int) -> None:
        cgfs.kill(pid)
        if not interrupted:  # once, while the first cgroup is being removed
            interrupted.append(pid)
            os.kill(os.getpid(), signal.SIGINT)

    def on_sigint(signum, frame):
        raise SecondInterrupt

    monkeypatch.setattr(cgroups, "_kill", kill)
    before = signal.signal(signal.SIGINT, on_sigint)
    try:
        tags = {"a": "a@run", "b": "b@run"}
        job_cgroups = mltcp_jobs.job_cgroups("mltcp_reno", tags, MltcpOptions())
        with pytest.raises(SecondInterrupt), job_cgroups as paths:
            cgfs.add(paths["a"], 941)
            cgfs.add(paths["b"], 942)
            raise KeyboardInterrupt  # the first Ctrl-C
    finally:
        signal.signal(signal.SIGINT, before)
    assert interrupted == [941] and list(cgfs.root.iterdir()) == []  # then delivered


def test_deferred_interrupts_reach_their_handler_after_the_block():
    from testbed.cgroups import interrupts_deferred

    got: list[str] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: got.append("handled"))
    try:
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            got.append("block done")
    finally:
        signal.signal(signal.SIGTERM, before)
    assert got == ["block done", "handled"]


def test_prio_job_classes_remove_the_cgroups_they_made(cgfs, monkeypatch, tmp_path):
    from testbed import dscp_jobs

    class Marker:  # the sock_ops program: not loaded here
        def __init__(self, build_dir: Path) -> None:
            self.attached: list[tuple[Path, int]] = []

        def attach(self, path: Path, priority: int) -> None:
            self.attached.append((path, priority))

        def unload(self) -> None:
            pass

    monkeypatch.setattr(dscp_jobs, "DscpMarker", Marker)
    theirs = cgfs.make("testbed-mltcp-7-a")  # MLTCP's: reused, not removed here
    with dscp_jobs.job_classes({"a": 0, "b": 1}, tmp_path, {"a": theirs}) as paths:
        assert paths["a"] == theirs and paths["b"].parent == cgfs.root
        cgfs.add(paths["b"], 921)
    assert sorted(p.name for p in cgfs.root.iterdir()) == ["testbed-mltcp-7-a"]
    assert cgfs.killed and set(cgfs.killed) == {921}


def test_cleanup_removes_the_cgroups_of_dead_runs_and_counts_them(
    cgfs, monkeypatch, tmp_path, capsys
):
    """`testbed cleanup` said "removed 0 leftover(s)" with testbed-mltcp-* cgroups left."""
    from testbed import cli, net

    alive = {500}
    monkeypatch.setattr(net, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(net, "_links", lambda: [])
    monkeypatch.setattr(net, "_alive", lambda pid: pid in alive)
    monkeypatch.setattr(net.subprocess, "run", lambda *a, **k: None)  # the ECN pins' rm
    dead_a = cgfs.make("testbed-mltcp-400-a", 931)
    dead_b = cgfs.make("testbed-prio-400-b")
    cgfs.make("testbed-mltcp-500-a", 932)  # a live run's
    cgfs.make("user.slice", 933)  # not ours
    assert cli.main(["cleanup"]) == 0
    out, err = capsys.readouterr()
    assert out == "removed 2 leftover(s)\n"
    assert f"removed cgroup {dead_a}" in err and f"removed cgroup {dead_b}" in err
    left = sorted(p.name for p in cgfs.root.iterdir())
    assert left == ["testbed-mltcp-500-a", "user.slice"] and set(cgfs.killed) == {931}
    # a run's own teardown (only_pid) leaves the cgroups to its own code
    cgfs.make("testbed-mltcp-401-a")
    assert net.cleanup(quiet=True, only_pid=401) == []
    assert (cgfs.root / "testbed-mltcp-401-a").exists()


@pytest.mark.root
def test_remove_on_the_real_kernel_waits_out_a_killed_process():
    """rmdir right after SIGKILL fails EBUSY on the real kernel; remove() waits."""
    require_root()
    from testbed import cgroups

    mounts = cgroups.cgroup2_mounts()
    require(bool(mounts), "a cgroup v2 mount")
    path = mounts[0] / run_name("testbed-teardown")
    path.mkdir()
    proc = subprocess.Popen(["sleep", "60"])
    try:
        (path / "cgroup.procs").write_text(str(proc.pid))
        said: list[str] = []
        assert cgroups.remove(path, say=said.append) is True, said
        assert not path.exists() and proc.wait(timeout=5) == -9
    finally:
        proc.kill()
        proc.wait()
        if path.exists():
            os.rmdir(path)


# -- item 3: the MLTCP a run loads stays loaded, and the run says so -----------------
MLTCP_CONFIG = {
    "topology": {"kind": "dumbbell", "pairs": 1, "bottleneck_bps": 1e8, "access_bps": 1e9},
    "jobs": [{"id": "a", "hosts": ["h1", "h2"], "iterations": 3}],
    "schemes": [{"scheme": "mltcp", "cc": "mltcp_reno"}],
}


def test_a_run_that_loads_mltcp_says_once_that_it_stays_loaded(monkeypatch, tmp_path):
    from mltcp import admin
    from testbed.run import experiment, load_config, session
    from testbed.run.schemes import SCHEMES

    have = ["reno", "cubic"]
    monkeypatch.setattr(session, "available_congestion_controls", lambda: tuple(have))
    monkeypatch.setattr(experiment, "available_congestion_controls", lambda: tuple(have))
    monkeypatch.setattr(admin, "load", lambda variant: have.extend(["mltcp_reno", "dctcp_bpf"]))

    class Stop(Exception):
        pass

    def scheme_runs(*_a):
        raise Stop

    monkeypatch.setattr(SCHEMES["mltcp"], "run", scheme_runs)
    said: list[str] = []
    with pytest.raises(Stop):
        experiment.run_experiment(load_config(MLTCP_CONFIG), tmp_path / "o", said.append)
    line = "mltcp: loaded for this run and left loaded; `mltcp unload` removes it"
    assert said[:2] == [line, "[1/1] mltcp: mltcp scheme"]
    # loaded already (by hand, or an earlier run): nothing said
    said.clear()
    assert session.ensure_cc("mltcp_reno", said.append) is False and said == []


def test_cleanup_help_says_mltcp_stays_loaded(capsys):
    from testbed import cli

    with pytest.raises(SystemExit):
        cli.main(["cleanup", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "`mltcp unload` removes them" in out and "cgroups" in out


# -- item 4: what a run prints -----------------------------------------------------
class Done:
    """A worker that has exited 0."""

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_a_scheme_shorter_than_a_progress_line_says_its_final_counts(tmp_path, capsys):
    """Without a terminal a line came every 5 s: a short scheme showed only "a 0/20"."""
    from testbed.run.report import wait_with_progress

    logs = {"a": tmp_path / "a.jsonl", "b": tmp_path / "b.jsonl"}
    logs["a"].write_text("{}\n" * 3)
    logs["b"].write_text("{}\n" * 2)
    said: list[str] = []
    codes = wait_with_progress([Done(), Done()], logs, {"a": 3, "b": 3}, 10.0, said.append)
    assert codes == [0, 0] and said == ["  a 3/3 b 2/3"]


def test_the_table_without_an_ideal_run_says_so_instead_of_nan():
    from testbed.results import ExperimentResult, JobResult, SchemeResult
    from testbed.run import format_table

    job = JobResult("a", (0.1, 0.1), 2_000_000, (Path("a-rank0.jsonl"),))
    base = SchemeResult("baseline", "baseline", "cubic", "fair", {"a": job})
    table = format_table(ExperimentResult({"baseline": base}, {}))
    assert "nan" not in table.lower(), table
    row = next(ln for ln in table.splitlines() if ln.startswith("baseline"))
    assert row.split()[-1] == "-" and len(row) == len(table.splitlines()[0])
    assert table.splitlines()[-1].startswith("vs ideal: - (no ideal run")
    ideal = SchemeResult("ideal", "ideal", "cubic", "fair", {"a": job})
    table = format_table(ExperimentResult({"ideal": ideal, "baseline": base}, {}))
    assert "1.00x" in table and "no ideal run" not in table


# -- item 6: python -m testbed -------------------------------------------------------
def test_python_m_testbed_is_the_testbed_command(monkeypatch, capsys):
    """``python -m testbed`` said "No module named testbed.__main__"."""
    monkeypatch.setattr(sys, "argv", ["testbed", "cleanup", "--help"])
    with warnings.catch_warnings():  # runpy: the package is imported already (here)
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(SystemExit) as exit_:
            runpy.run_module("testbed", run_name="__main__", alter_sys=True)
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: testbed cleanup")


# -- item 5: experiment 2's model summary -------------------------------------------
def test_the_model_summary_is_at_mltcps_defaults_as_results_json_says(tmp_path, capsys):
    """It printed "intercept 0.5: ... slope 2.0: 4" while the defaults are slope 2,
    intercept 1, which results.json's grid puts at 5."""
    import numpy as np

    from experiments import mltcp_convergence
    from mltcp.policy import MltcpParams

    assert mltcp_convergence.main(["--model-only", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "results.json").read_text())
    s, p = data["sweep"], MltcpParams()
    k = np.array(s["iterations_to_interleave"])
    at = k[s["slopes"].index(p.slope), s["intercepts"].index(p.intercept), s["offsets"].index(0.1)]
    assert f"at MLTCP's defaults (slope {p.slope:g}, intercept {p.intercept:g}): {at};" in out
    assert s["defaults"] == {
        "slope": p.slope, "intercept": p.intercept, "offset": 0.1, "iterations_to_interleave": at
    }  # fmt: skip
    # the offsets' unit, and what -1 means, are in the JSON
    assert "fraction of a phase" in s["units"]["offsets"]
    assert "-1: never" in s["units"]["iterations_to_interleave"]
    assert "fraction of a communication phase" in data["units"]["offsets"]


def test_the_sweep_takes_its_defaults_from_mltcps_parameters(monkeypatch):
    from experiments import mltcp_convergence
    from mltcp.policy import MltcpParams

    @dataclass(frozen=True)
    class Other(MltcpParams):
        slope: float = 1.25
        intercept: float = 0.75

    monkeypatch.setattr(mltcp_convergence, "MltcpParams", Other)
    s = mltcp_convergence.sweep(iterations=20)
    assert 1.25 in s["slopes"] and 0.75 in s["intercepts"]
    assert (s["defaults"]["slope"], s["defaults"]["intercept"]) == (1.25, 0.75)
    assert "(slope 1.25, intercept 0.75)" in mltcp_convergence.sweep_summary(s)
