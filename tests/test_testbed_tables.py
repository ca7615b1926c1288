"""The testbed's variant tables are the only place to edit: a fabric is one class in
``testbed.fabric.FABRICS`` (docs/extending.md, "Add a fabric")."""

import ast
from pathlib import Path

import pytest

from testbed import fabric
from testbed.fabric import FABRICS, Fabric
from testbed.runner import load_config
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
    assert set(FABRICS) == {"fifo", "fair", "ecn"}
    for name, regime in FABRICS.items():
        assert regime.name == name and FabricSpec(name).regime is regime
    with pytest.raises(ValueError, match="fifo, fair, ecn"):
        FabricSpec("tagged")


def test_a_new_fabric_is_one_entry_in_the_table(monkeypatch):
    monkeypatch.setitem(FABRICS, "tagged", _Tagged())
    raw = {**CONFIG, "topology": {**CONFIG["topology"], "fabric": "tagged"}}
    cfg = load_config(raw)
    assert cfg.topology.fabric.regime is FABRICS["tagged"]
    assert cfg.cc == "reno"  # the fabric's default control
    from testbed.runner import _cc

    mltcp = next(s for s in cfg.schemes if s.kind == "mltcp")
    assert _cc(cfg, mltcp) == "mltcp_cubic"
    cmds = fabric.commands(cfg.topology.fabric, "tbs1-eth3", 2e8)
    assert cmds == [["tc", "qdisc", "replace", "dev", "tbs1-eth3", "root", "tagged", "200000000"]]


def test_no_module_but_the_table_compares_fabric_names():
    """Behaviour follows the regime's attributes: a fabric's name is never compared with
    ``==``/``in`` outside ``testbed/fabric.py`` (as it was in six places)."""
    names = set(FABRICS)
    found = []
    for path in sorted(TESTBED.rglob("*.py")):
        if path.name == "fabric.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for const in ast.walk(node):
                    if isinstance(const, ast.Constant) and const.value in names:
                        found.append(f"{path.name}:{node.lineno} {const.value!r}")
    assert found == []


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
