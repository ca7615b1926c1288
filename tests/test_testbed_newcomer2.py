"""A newcomer's review of the ``testbed`` command (2026-11-29), the findings that need no
root: where each scheme writes its logs, names that take the run's own files, a crashed
run's leftovers and a Ctrl-C during bring-up (the cluster's side, with stand-ins for
Mininet), log paths that survive the working directory and a moved folder, an interrupted
run's results.json, and the field names of config errors."""

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cassini.errors import InputError
from testbed import net, topo
from testbed.host import TestbedError
from testbed.results import ExperimentResult, JobResult, SchemeResult
from testbed.run import ConfigError, SchemeSpec, load_config
from testbed.run import experiment as experiment_mod
from testbed.run import schemes as schemes_mod
from testbed.run.schemes import SCHEMES, RunState

CONFIG = {
    "topology": {
        "kind": "dumbbell",
        "pairs": 2,
        "bottleneck_bps": 200000000,
        "access_bps": 1000000000,
        "fabric": "fair",
    },
    "jobs": [
        {"id": "a", "hosts": ["h1", "h3"], "compute_s": 0.05, "bytes": 1250000, "iterations": 5},
        {"id": "b", "hosts": ["h2", "h4"], "compute_s": 0.05, "bytes": 1250000, "iterations": 5},
    ],
    "schemes": ["baseline"],
}


def config(*schemes, **extra):
    return {**CONFIG, "schemes": list(schemes), **extra}


def quiet(msg: str) -> None:
    pass


# -- 1: an ideal scheme's logs under its own name ---------------------------------------
def fake_together(seen):
    """``run_together`` that records where each job alone would log, runs nothing."""

    def run(cfg, spec, cc, where, schedule, say, capture=None, **kw):
        seen.append((spec.name, where))
        job = cfg.jobs[0].job_id
        logs = (where / f"{job}-rank0.jsonl",)
        return SchemeResult(
            spec.name, spec.kind, cc, "fair", {job: JobResult(job, (0.1,), 1, logs)}
        )

    return run


def test_two_ideal_schemes_log_each_in_its_own_folder(tmp_path, monkeypatch):
    """``schemes: [ideal, {scheme: ideal, name: ideal_reno, cc: reno}]`` wrote both into
    OUT/ideal-a/: the cubic entry's logs held the reno run's records."""
    seen = []
    monkeypatch.setattr(schemes_mod, "run_together", fake_together(seen))
    monkeypatch.setattr(schemes_mod.profiles, "measured_profile", lambda *a: None)
    monkeypatch.setattr(RunState, "learn_from", lambda self, res: None)
    cfg = load_config(config("ideal", {"scheme": "ideal", "name": "ideal_reno", "cc": "reno"}))
    state = RunState(cfg, tmp_path, quiet)
    logs = {}
    for spec in cfg.schemes:
        res = SCHEMES["ideal"].run(state, spec)
        logs[spec.name] = {j: r.logs[0] for j, r in res.jobs.items()}
    assert [w for _, w in seen] == [
        tmp_path / "ideal" / "a",
        tmp_path / "ideal" / "b",
        tmp_path / "ideal_reno" / "a",
        tmp_path / "ideal_reno" / "b",
    ]
    assert logs["ideal"]["a"] == tmp_path / "ideal" / "a" / "a-rank0.jsonl"
    assert logs["ideal"]["a"] != logs["ideal_reno"]["a"]


def test_a_baseline_called_like_the_old_ideal_folder_shares_nothing(tmp_path, monkeypatch):
    """``schemes: [{scheme: baseline, name: ideal-a}, ideal]`` ran, exit 0, and the
    baseline overwrote the ideal run's logs of job a."""
    seen = []
    monkeypatch.setattr(schemes_mod, "run_together", fake_together(seen))
    monkeypatch.setattr(schemes_mod.profiles, "measured_profile", lambda *a: None)
    monkeypatch.setattr(RunState, "learn_from", lambda self, res: None)
    cfg = load_config(config({"scheme": "baseline", "name": "ideal-a"}, "ideal"))
    state = RunState(cfg, tmp_path, quiet)
    for spec in cfg.schemes:
        SCHEMES[spec.kind].run(state, spec)
    folders = [w for _, w in seen]
    assert tmp_path / "ideal-a" in folders  # the baseline's
    assert not [w for name, w in seen if name == "ideal" and w == tmp_path / "ideal-a"]
    assert len(set(folders)) == len(folders)


def test_cassinis_profiling_run_logs_in_its_own_folder(tmp_path, monkeypatch):
    """Without an ideal scheme, CASSINI's short profiling run went to OUT/profiling: a
    scheme of that name shared the folder."""
    where = []

    class Stop(Exception):
        pass

    def alone(cfg, spec, cc, out, say):
        where.append(out)
        raise Stop

    monkeypatch.setattr(schemes_mod, "run_alone", alone)
    cfg = load_config(config({"scheme": "baseline", "name": "profiling"}, "cassini"))
    with pytest.raises(Stop):
        SCHEMES["cassini"].run(RunState(cfg, tmp_path, quiet), cfg.schemes[1])
    assert where == [tmp_path / "cassini" / "profiling"]


# -- 4: a scheme may not take the run's own file ----------------------------------------
def test_a_scheme_called_results_json_is_refused_at_load():
    """``{scheme: baseline, name: results.json}`` ran the whole scheme, then died on
    IsADirectoryError writing OUT/results.json, no results saved."""
    with pytest.raises(ConfigError) as err:
        load_config(config("baseline", {"scheme": "baseline", "name": "results.json"}))
    assert err.value.field == "schemes[1].name" and "results.json" in err.value.problem


def test_run_experiment_refuses_it_before_any_scheme_runs(tmp_path, monkeypatch):
    """A config built in code never passed the loader's check."""
    cfg = load_config(config("baseline"))
    cfg = replace(cfg, schemes=(SchemeSpec("results.json", "baseline"),))
    monkeypatch.setattr(SCHEMES["baseline"], "run", lambda *a: pytest.fail("a scheme ran"))
    monkeypatch.setattr(experiment_mod, "ensure_cc", lambda *a: pytest.fail("cc loaded"))
    with pytest.raises(InputError, match=r"schemes\[0\]\.name"):
        experiment_mod.run_experiment(cfg, tmp_path / "o", progress=quiet)
    assert not (tmp_path / "o").exists()


# -- 2 and 3: the cluster's bring-up ----------------------------------------------------
@pytest.fixture
def no_host(monkeypatch):
    """The cluster's host side stubbed out: no prerequisites, lock, sysctl or cleanup;
    building Mininet fails the test.  Returns the calls to cleanup."""
    import mininet.net

    cleaned = []
    monkeypatch.setattr(net, "check_prerequisites", lambda: None)
    monkeypatch.setattr(net.hostlock, "acquire", lambda *a, **k: None)
    monkeypatch.setattr(net.hostlock, "release", lambda: None)
    monkeypatch.setattr(net, "allow_congestion_control", lambda cc: pytest.fail("sysctl set"))
    monkeypatch.setattr(mininet.net, "Mininet", lambda *a, **k: pytest.fail("Mininet built"))
    monkeypatch.setattr(net, "cleanup", lambda **k: cleaned.append(k) or [])
    return cleaned


def test_a_crashed_runs_leftovers_stop_the_run_before_the_cluster_starts(no_host, monkeypatch):
    """A run killed with SIGKILL left tbs1-eth3/tbs2-eth3: the next run died in a
    30-line Mininet traceback ("RTNETLINK answers: File exists"), no word of cleanup."""
    monkeypatch.setattr(net, "leftovers", lambda: ["tbs1", "tbs2", "tbs1-eth3", "tbs2-eth3"])
    monkeypatch.setattr(net.EmulatedCluster, "_record_state", lambda self: pytest.fail("recorded"))
    with pytest.raises(TestbedError) as err, net.EmulatedCluster(topo.dumbbell(2, 200e6, 1e9)):
        pytest.fail("the cluster started")
    assert str(err.value) == (
        "leftovers of an earlier run (tbs1 tbs2 tbs1-eth3 tbs2-eth3): run 'sudo testbed cleanup'"
    )


def test_the_command_says_so_in_one_line(no_host, monkeypatch, tmp_path, capsys):
    from testbed import cli, run

    monkeypatch.setattr(net, "leftovers", lambda: ["tbs1-eth3"])

    def fake_run(cfg, out, progress=None):
        with net.EmulatedCluster(cfg.topology):
            pytest.fail("the cluster started")

    monkeypatch.setattr(run, "run_experiment", fake_run)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config("baseline")))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["testbed: error: leftovers of an earlier run (tbs1-eth3): "
                   "run 'sudo testbed cleanup'"]  # fmt: skip


class Node:
    """A Mininet node: its shell a real process in its own session (as Mininet starts
    one), ``waiting`` while a command it was sent runs; its ``cmd`` asserts as Mininet's
    ``sendCmd`` does."""

    def __init__(self, waiting):
        self.shell = self.proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        self.waiting = waiting
        self.cleaned = False

    def cleanup(self):  # Mininet's: closes the terminal, drops the shell
        self.cleaned, self.shell = True, None

    def cmd(self, *args):
        if self.shell is None:  # Mininet: "(h1 exited - ignoring cmd ...)"
            return None
        assert self.shell and not self.waiting
        return ""


class Net:
    def __init__(self, hosts, switches):
        self.hosts, self.switches = hosts, switches

    def stop(self):
        for node in (*self.switches, *self.hosts):
            node.cmd("ifconfig", node, "down")


@pytest.fixture
def nodes():
    """``make(waiting)`` -> a :class:`Node`; their shells killed after the test."""
    made = []

    def make(waiting):
        made.append(Node(waiting))
        return made[-1]

    yield make
    for node in made:
        if node.proc.poll() is None:
            node.proc.kill()
        node.proc.wait()


def test_ctrl_c_during_bring_up_tears_down_without_an_assertion(no_host, nodes):
    """Ctrl-C while Mininet waited for a bridge's ``brctl`` left that shell waiting, and
    net.stop()'s own command asserted: AssertionError, exit 1, not "interrupted", 130."""
    cluster = net.EmulatedCluster(topo.dumbbell(2, 200e6, 1e9))
    host, busy = nodes(False), nodes(True)
    cluster.net = Net([host], [busy])
    cluster.stop()  # no AssertionError
    assert busy.proc.poll() is not None  # the cut-off shell killed (its links: cleanup's)
    assert busy.cleaned and not busy.waiting
    assert host.shell.poll() is None and not host.cleaned  # the others: Mininet's to stop
    assert cluster.net is None and no_host == [{"quiet": True, "only_pid": os.getpid()}]


def test_ctrl_c_inside_start_comes_out_as_keyboard_interrupt(no_host, nodes):
    """The whole path: start() interrupted with a shell waiting, __enter__'s stop()."""
    busy = nodes(True)

    def start(self):
        self.net = Net([], [busy])
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as m:
        m.setattr(net.EmulatedCluster, "start", start)
        with pytest.raises(KeyboardInterrupt), net.EmulatedCluster(topo.dumbbell(2, 200e6, 1e9)):
            pytest.fail("the cluster started")
    assert busy.cleaned


def test_a_run_killed_a_moment_ago_is_not_alive_to_cleanup():
    """A run killed with SIGKILL stays a zombie until reaped (a second here, where PID 1
    reaps slowly): ``testbed cleanup`` right after took it for a live run and removed
    nothing ("removed 0 leftover(s)"), the links it had just been told about left."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert net._alive(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        stat = Path(f"/proc/{proc.pid}/stat")
        for _ in range(500):  # exited, not reaped: its parent (this test) has not waited
            if stat.read_text().rpartition(")")[2].split()[0] == "Z":
                break
            time.sleep(0.01)
        assert not net._alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not net._alive(proc.pid) and not net._alive(None)


# -- 5: log paths that do not depend on the reader's working directory -------------------
def fake_scheme(name="baseline", fail=None):
    """A scheme's ``run`` that writes job a's rank-0 log in its folder (or raises)."""

    def run(state, spec):
        if fail is not None:
            raise fail
        folder = state.out / spec.name
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "a-rank0.jsonl"
        log.write_text(json.dumps({"iter": 0, "end": 1.0, "bytes_sent": 7}) + "\n")
        job = JobResult("a", (0.1,), 7, (log,))
        return SchemeResult(spec.name, spec.kind, "cubic", "fair", {"a": job})

    return run


@pytest.fixture
def no_kernel(monkeypatch):
    monkeypatch.setattr(experiment_mod, "available_congestion_controls", lambda: ("reno", "cubic"))
    monkeypatch.setattr(experiment_mod, "ensure_cc", lambda *a: False)


def test_a_relative_out_reads_back_from_anywhere_and_after_a_move(tmp_path, monkeypatch, no_kernel):
    """``cd /tmp/revP4 && testbed run c1.yaml --out relout``, then from /:
    ExperimentResult.read(...).schemes['baseline'].jobs['a'].records() ->
    FileNotFoundError 'relout/baseline/a-rank0.jsonl'."""
    monkeypatch.setattr(SCHEMES["baseline"], "run", fake_scheme())
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "run")
    res = experiment_mod.run_experiment(load_config(config("baseline")), "relout", progress=quiet)
    path = tmp_path / "run" / "relout" / "results.json"
    stored = json.loads(path.read_text())
    assert stored["schemes"]["baseline"]["jobs"]["a"]["logs"] == ["baseline/a-rank0.jsonl"]
    assert stored == res.to_dict()  # the result returned is what the file holds
    assert res.schemes["baseline"].jobs["a"].logs[0].is_absolute()
    monkeypatch.chdir("/")
    read = ExperimentResult.read(path)
    assert read.schemes["baseline"].jobs["a"].records()[0]["bytes_sent"] == 7
    assert read.to_dict() == stored
    moved = tmp_path / "moved"
    (tmp_path / "run" / "relout").rename(moved)
    assert ExperimentResult.read(moved / "results.json").schemes["baseline"].jobs["a"].records()


def test_old_results_with_cwd_relative_or_absolute_paths_still_read(tmp_path):
    """Files written before: absolute paths, or relative to the run's working directory."""
    from testbed.results import resolve_log

    folder = tmp_path / "cwd" / "relout"
    (folder / "baseline").mkdir(parents=True)
    log = folder / "baseline" / "a-rank0.jsonl"
    log.write_text("{}\n")
    assert resolve_log(str(log), folder) == log  # absolute, where it was
    assert resolve_log("relout/baseline/a-rank0.jsonl", folder) == log  # the old cwd's
    assert resolve_log("baseline/a-rank0.jsonl", folder) == log  # today's
    gone = "/elsewhere/relout/baseline/a-rank0.jsonl"  # absolute, the folder moved since
    assert resolve_log(gone, folder) == log
    assert resolve_log("baseline/b-rank0.jsonl", folder) == folder / "baseline/b-rank0.jsonl"
    assert resolve_log("x/y.jsonl", None) == Path("x/y.jsonl")


def test_the_json_on_stdout_names_absolute_logs(tmp_path, monkeypatch, capsys):
    """stdout has no folder to be relative to."""
    from testbed import cli, run

    log = tmp_path / "o" / "baseline" / "a-rank0.jsonl"
    job = JobResult("a", (0.1,), 1, (log,))
    result = ExperimentResult(
        {"baseline": SchemeResult("baseline", "baseline", "cubic", "fair", {"a": job})},
        {},
        folder=tmp_path / "o",
    )
    monkeypatch.setattr(run, "run_experiment", lambda cfg, out, progress=None: result)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config("baseline")))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["schemes"]["baseline"]["jobs"]["a"]["logs"] == [str(log)]


# -- 6: an interrupted run's results.json says it is partial ----------------------------
@pytest.mark.parametrize("stop", [KeyboardInterrupt(), TestbedError("baseline: workers died")])
def test_a_run_cut_short_keeps_a_results_json_marked_incomplete(tmp_path, monkeypatch, no_kernel,
                                                                 stop):  # fmt: skip
    """Interrupted after ideal: results.json was whole, schemes {ideal} of [ideal,
    baseline], and nothing in it (or on stderr) said it was partial."""
    monkeypatch.setattr(SCHEMES["ideal"], "run", fake_scheme())
    monkeypatch.setattr(SCHEMES["baseline"], "run", fake_scheme(fail=stop))
    heard = []
    with pytest.raises(type(stop)):
        experiment_mod.run_experiment(
            load_config(config("ideal", "baseline")), tmp_path, progress=heard.append
        )
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["complete"] is False and list(stored["schemes"]) == ["ideal"]
    assert ExperimentResult.read(tmp_path / "results.json").complete is False
    said = [m for m in heard if "partial" in m]
    assert said == [f'partial results kept: {tmp_path / "results.json"} ("complete": false; '
                    "ran ideal; not run: baseline)"]  # fmt: skip


def test_a_whole_run_is_marked_complete(tmp_path, monkeypatch, no_kernel):
    monkeypatch.setattr(SCHEMES["ideal"], "run", fake_scheme())
    monkeypatch.setattr(SCHEMES["baseline"], "run", fake_scheme())
    written = []
    real_write = ExperimentResult.write
    monkeypatch.setattr(
        ExperimentResult,
        "write",
        lambda self, p: written.append(self.complete) or real_write(self, p),
    )
    res = experiment_mod.run_experiment(
        load_config(config("ideal", "baseline")), tmp_path, progress=quiet
    )
    assert written == [False, False, True] and res.complete  # the first: before any scheme
    assert json.loads((tmp_path / "results.json").read_text())["complete"] is True
    old = res.to_dict()
    del old["complete"]  # a file from before the field: whole
    assert ExperimentResult.from_dict(old).complete is True


def test_a_rerun_cut_short_in_its_first_scheme_leaves_no_complete_results(
    tmp_path, monkeypatch, no_kernel
):
    """A second run into the same folder, interrupted in its first scheme, left the first
    run's results.json saying "complete": true beside logs the second run overwrote."""
    monkeypatch.setattr(SCHEMES["ideal"], "run", fake_scheme())
    monkeypatch.setattr(SCHEMES["baseline"], "run", fake_scheme())
    cfg = load_config(config("ideal", "baseline"))
    experiment_mod.run_experiment(cfg, tmp_path, progress=quiet)
    assert json.loads((tmp_path / "results.json").read_text())["complete"] is True
    monkeypatch.setattr(SCHEMES["ideal"], "run", fake_scheme(fail=KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        experiment_mod.run_experiment(
            load_config(config("ideal", "baseline")), tmp_path, progress=quiet
        )
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["complete"] is False and stored["schemes"] == {}
    assert ExperimentResult.read(tmp_path / "results.json").complete is False


# -- cosmetic ---------------------------------------------------------------------------
def test_a_host_in_two_jobs_names_the_field_as_every_other_job_error():
    """``jobs.b.hosts`` here, ``jobs[0].hosts`` everywhere else."""
    raw = config("baseline")
    raw["jobs"] = [raw["jobs"][0], {**raw["jobs"][1], "hosts": ["h1", "h4"]}]
    with pytest.raises(ConfigError) as err:
        load_config(raw)
    assert err.value.field == "jobs[1].hosts" and err.value.problem == "h1 already runs job a"


def test_fixed_routing_is_as_the_topology_docstring_says():
    """The docstring said ``tbp{i mod spines + 1}`` for host i: h1 crosses tbp1, not tbp2."""
    rule = re.search(r"to host ``h<i>``: spine ``tbp\{(.+?)\}``", topo.__doc__ or "")
    assert rule, "the fixed rule is stated in testbed.topo's docstring"
    expr = rule.group(1).replace("mod", "%")
    for spines in (1, 2, 3):
        t = topo.leaf_spine(leaves=2, spines=spines, hosts_per_leaf=3, host_bps=1e9)
        for host in t.hosts:
            i = int(host[1:])
            stated = f"tbp{eval(expr, {}, {'i': i, 'spines': spines})}"  # noqa: S307
            assert t.spine_for("tbl1", host) == stated, (host, spines)


def test_a_known_but_unavailable_control_is_a_config_error_naming_its_field(
    tmp_path, monkeypatch, capsys
):
    """``cc: dctcp`` (known, not loaded) exited 1 as a testbed error; ``cc: bogus`` 2."""
    from testbed import cli

    monkeypatch.setattr(experiment_mod, "available_congestion_controls", lambda: ("reno", "cubic"))
    monkeypatch.setattr(experiment_mod, "ensure_cc", lambda *a: pytest.fail("cc loaded"))
    monkeypatch.setattr(SCHEMES["baseline"], "run", lambda *a: pytest.fail("a scheme ran"))
    cfg = load_config(config("baseline", {"scheme": "baseline", "name": "d", "cc": "dctcp"}))
    with pytest.raises(ConfigError) as err:
        experiment_mod.check_congestion_controls(cfg)
    assert err.value.field == "schemes[1].cc" and "'dctcp' is not available" in str(err.value)
    assert isinstance(err.value, TestbedError)  # still one, for its callers
    top = load_config(config("baseline", cc="dctcp"))
    with pytest.raises(ConfigError) as err:
        experiment_mod.check_congestion_controls(top)
    assert err.value.field == "cc"
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config("baseline", cc="dctcp")))
    assert cli.main(["run", str(path), "--out", str(tmp_path / "o")]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith(f"testbed: config error: {path}: cc: ")


def test_sim_validation_reads_a_runs_logs_from_anywhere(tmp_path, monkeypatch):
    """``sim_validation --results DIR/results.json`` read the file with from_dict, no
    folder: the logs, now relative to DIR, were looked for in the cwd, and the phase
    replay silently left its columns out (experiment 1's root test: KeyError)."""
    from experiments import common
    from experiments import sim_validation as sv

    raw = sv.scenario("pair", 10)
    profiles = common.nominal_profiles(load_config(raw))
    folder = tmp_path / "run"
    jobs = {}
    for job in profiles:
        log = folder / "ideal" / job / f"{job}-rank0.jsonl"
        log.parent.mkdir(parents=True)
        log.write_text("{}\n")
        jobs[job] = JobResult(job, (0.1,) * 9, 0, (log,))
    ideal = SchemeResult("ideal", "ideal", "cubic", "fair", jobs, profiles=profiles)
    ExperimentResult({"ideal": ideal}, raw).write(folder / "results.json")
    monkeypatch.chdir(tmp_path)
    read = sv.read_results(folder / "results.json")
    assert [j.logs[0] for j in read.schemes["ideal"].jobs.values()] == [
        folder / "ideal" / job / f"{job}-rank0.jsonl" for job in profiles
    ]
