"""The testbed's variant tables are the only place to edit: a fabric is one class in
``testbed.fabric.FABRICS`` (docs/extending.md, "Add a fabric"), a scheme one class in
``testbed.run.schemes.SCHEMES`` ("Add a testbed scheme")."""

import ast
from pathlib import Path

import pytest

from testbed import fabric
from testbed.fabric import FABRICS, Fabric
from testbed.results import JobResult, SchemeResult
from testbed.run import ConfigError, SchemeSpec, load_config, run_experiment
from testbed.run.schemes import SCHEMES, RunState, Scheme
from testbed.topo import FabricSpec

TESTBED = Path(__file__).resolve().parent.parent / "testbed"

CONFIG = {
    "topology": {"kind": "dumbbell", "pairs": 2, "bottleneck_bps": 2e8, "fabric": "fair"},
    "jobs": [
        {"id": "a", "hosts": ["h1", "h3"], "iterations": 5},
        {"id": "b", "hosts": ["h2", "h4"], "iterations": 5},
    ],
    "schemes": ["baseline", "mltcp"],
}


class _Tagged(Fabric):
    """A made-up regime: one tc command naming itself, its own controls and ECN."""

    name = "tagged"
    host_ecn = 1
    default_cc = "reno"
    mltcp_cc = "mltcp_cubic"

    def commands(self, spec, dev, rate_bps, job_sources=(), pinned_prog=None):
        return [["tc", "qdisc", "replace", "dev", dev, "root", "tagged", str(int(rate_bps))]]


def test_the_config_accepts_exactly_the_fabrics_of_the_table():
    assert set(FABRICS) == {"fifo", "fair", "ecn", "prio"}
    for name, regime in FABRICS.items():
        assert regime.name == name and FabricSpec(name).regime is regime
    with pytest.raises(ValueError, match="fifo, fair, ecn"):
        FabricSpec("tagged")


def run_help(capsys) -> str:
    """What ``testbed run --help`` prints."""
    from testbed import cli

    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    return capsys.readouterr().out


def test_a_new_fabric_is_one_entry_in_the_table(monkeypatch, capsys):
    monkeypatch.setitem(FABRICS, "tagged", _Tagged())
    raw = {**CONFIG, "topology": {**CONFIG["topology"], "fabric": "tagged"}}
    cfg = load_config(raw)
    assert cfg.topology.fabric.regime is FABRICS["tagged"]
    assert cfg.cc == "reno"  # the fabric's default control
    mltcp = next(s for s in cfg.schemes if s.kind == "mltcp")
    assert SCHEMES["mltcp"].congestion_control(cfg, mltcp) == "mltcp_cubic"
    cmds = fabric.commands(cfg.topology.fabric, "tbs1-eth3", 2e8)
    assert cmds == [["tc", "qdisc", "replace", "dev", "tbs1-eth3", "root", "tagged", "200000000"]]
    assert "fabric fifo | fair | ecn | prio | tagged with" in run_help(capsys)


def compared_names(names: set[str], table_module: Path) -> list[str]:
    """Where a module of testbed/ other than ``table_module`` compares a string of
    ``names`` (``==``, ``!=``, ``in``): a branch on a variant's name outside its table."""
    found = []
    for path in sorted(TESTBED.rglob("*.py")):
        if path == table_module:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for const in ast.walk(node):
                    if isinstance(const, ast.Constant) and const.value in names:
                        found.append(f"{path.name}:{node.lineno} {const.value!r}")
    return found


def test_no_module_but_the_table_compares_fabric_names():
    """Behaviour follows the regime's attributes: a fabric's name is never compared
    outside ``testbed/fabric.py`` (as it was in six places)."""
    assert compared_names(set(FABRICS), TESTBED / "fabric.py") == []


def test_the_testbed_measures_profiles_with_cassinis_one_implementation():
    """Turning logs and captures into profiles is ``cassini.measure``'s; no testbed module
    defines a function of the same name (there was a second ``measure.py``)."""
    import inspect

    from cassini import measure

    public = {n for n, f in inspect.getmembers(measure, inspect.isfunction) if n[0] != "_"}
    assert {"profile_from_log", "profile_from_pcap", "iteration_times"} <= public
    defined = {
        f"{path.name}:{node.name}"
        for path in TESTBED.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name in public
    }
    assert defined == set()
    assert not (TESTBED / "measure.py").exists()


class _Replay(Scheme):
    """A made-up scheme that needs no cluster: every job "ran" at its configured compute
    time, declaring the ``mode`` option."""

    kind = "replayed"
    runs_first = True
    options = frozenset({"mode"})

    def run(self, state: RunState, spec: SchemeSpec) -> SchemeResult:
        jobs = {
            j.job_id: JobResult(j.job_id, (j.compute_s,) * j.iterations, 0, ())
            for j in state.cfg.jobs
        }
        cc = self.congestion_control(state.cfg, spec)
        return SchemeResult(spec.name, spec.kind, cc, state.cfg.topology.fabric.kind, jobs)


def test_the_config_accepts_exactly_the_schemes_of_the_table():
    assert set(SCHEMES) == {"ideal", "baseline", "random", "cassini", "mltcp"}
    assert all(s.kind == name for name, s in SCHEMES.items())
    with pytest.raises(ConfigError, match="unknown scheme 'replayed'"):
        load_config({**CONFIG, "schemes": ["replayed"]})
    # options belong to the schemes that declare them
    with pytest.raises(ConfigError, match=r"schemes\[0\].mode.*for mltcp only"):
        load_config({**CONFIG, "schemes": [{"scheme": "baseline", "mode": "exact"}]})


def test_a_new_scheme_is_one_entry_in_the_table(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(SCHEMES, "replayed", _Replay())
    raw = {**CONFIG, "schemes": ["baseline", {"scheme": "replayed", "mode": "exact"}]}
    cfg = load_config(raw)
    assert [s.kind for s in cfg.schemes] == ["baseline", "replayed"]
    assert cfg.schemes[1].mltcp.mode == "exact"  # its declared option is accepted
    ran = []
    monkeypatch.setitem(SCHEMES, "baseline", _Recorder(ran))
    res = run_experiment(cfg, tmp_path, progress=lambda m: None)
    assert ran == [["replayed"]]  # it ran first (runs_first), then baseline
    assert list(res.schemes) == ["replayed", "baseline"]
    assert res.schemes["replayed"].jobs["a"].iteration_times_s == (0.05,) * 5
    assert (tmp_path / "results.json").exists()
    assert "schemes: ideal | baseline | random | cassini | mltcp | replayed," in run_help(capsys)


class _Recorder(Scheme):
    """Stands in for baseline: records which schemes ran before it."""

    kind = "baseline"

    def __init__(self, ran: list) -> None:
        self.ran = ran

    def run(self, state: RunState, spec: SchemeSpec) -> SchemeResult:
        self.ran.append(list(state.done))
        return SchemeResult(spec.name, spec.kind, state.cfg.cc, "fair", {})


def test_no_module_but_the_table_compares_scheme_names():
    """Dispatch is by table: outside ``testbed/run/schemes.py`` no testbed module
    branches on a scheme's name (``if scheme.kind == ...``), but for two facts about
    results: ratios are against the ``ideal`` scheme's run (``ExperimentResult.ideal``),
    and a CASSINI that declines every shift stands for the same-start ``baseline`` run
    (:func:`testbed.run.planning.same_schedule`)."""
    found = compared_names(set(SCHEMES), TESTBED / "run" / "schemes.py")
    ideal = _line_of("results.py", 's.kind == "ideal"')
    baseline = _line_of("run/planning.py", 'res.kind == "baseline"')
    assert sorted(found) == [f"planning.py:{baseline} 'baseline'", f"results.py:{ideal} 'ideal'"]


def _line_of(name: str, text: str) -> int:
    lines = (TESTBED / name).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)
