"""A newcomer's review of sweeps, the packet model's report, recorded traces on a
generated fat-tree, and the help and docs that name them (review I)."""

from __future__ import annotations

import functools
import json
import math
import signal
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import require_module
from test_sim_sweep_report import _FakeRay  # Ray as sweep._on_ray calls it

from cassini import cli
from cassini.errors import InputError
from cassini.sim.config import config_from_dict, run_warnings
from cassini.sim.network.packet import PacketNetwork
from cassini.sim.network.windows import WindowNetwork
from cassini.sim.recorded import unmatched_hosts_warning
from cassini.sim.report import sweep
from cassini.sim.report.page import NOT_MEASURED
from cassini.sim.report.recording import NetworkRecorder
from cassini.sim.report.run import simulate_config, write_run

ROOT = Path(__file__).resolve().parents[1]

#: pk2.yaml of the review: its jobs share tor1, which the window model finds congested
CONTENDED = {
    "name": "tiny packet 2",
    "cluster": {"racks": 3, "servers_per_rack": 2, "gpus_per_server": 1,
                "server_link_bps": 5e10, "oversubscription": 2},
    "workload": {"poisson": {"jobs": 4, "load": 3.0, "gpus": {"3": 1},
                             "iterations": [10, 20]}},
    "schedulers": ["themis", "themis+cassini"],
    "candidates": 4,
    "seed": 0,
}  # fmt: skip
FAT_TREE = {"generate": "fat-tree", "k": 4, "gpus_per_server": 2, "server_link_bps": 5e10}
RECORDED = {
    "name": "fat-tree recorded",
    "cluster": FAT_TREE,
    "workload": {"trace": "trace.csv", "format": "csv"},
    "schedulers": ["recorded", "recorded+cassini", "themis"],
    "seed": 0,
}
TRACE_HEADER = "job_id,arrival_s,gpus,iterations,model,hosts\n"


def _trace(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(TRACE_HEADER + "".join(f"{r}\n" for r in rows))
    return path


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


# -- 1. network: packet measures no excess demand: null, and the report says so --------


def _packet_excess(cluster) -> dict[str, float]:
    """What PacketNetwork reports as excess demand on ``cluster`` (its ns-3 half, which
    needs the wheel, left out: the engine's WindowNetwork state is all it reads)."""
    net = PacketNetwork.__new__(PacketNetwork)
    WindowNetwork.__init__(net, SimpleNamespace(cluster=cluster))
    return net.excess_s()


def test_packet_network_reports_excess_as_not_measured() -> None:
    cfg = config_from_dict(CONTENDED)
    excess = _packet_excess(cfg.cluster)
    assert excess and set(excess) == set(cfg.cluster.links)
    assert all(math.isnan(s) for s in excess.values())  # was {}: read as "never congested"


def test_packet_run_report_gives_excess_as_null_and_says_not_measured(tmp_path) -> None:
    """The review's pk2 under packet: excess demand was 0.0, tor1 "the busiest; no link
    was ever congested", and link_timeline.png said tor1 "never slowed anyone".  The
    inputs are the window model's run of the same config (tor1 congested there) with
    what the packet model gives instead: its excess and no recorded windows."""
    cfg = config_from_dict(CONTENDED)
    done = simulate_config(cfg, record=True)
    assert all(r.excess_s.get("tor1", 0) > 0 for r in done.results.values())  # contended
    excess = _packet_excess(cfg.cluster)
    done.results = {n: replace(r, excess_s=dict(excess)) for n, r in done.results.items()}
    done.recorders = {n: NetworkRecorder() for n in done.results}  # ns-3's: none recorded
    write_run(cfg, done.results, tmp_path, run=done)
    data = json.loads((tmp_path / "results.json").read_text())
    for s in data["summaries"].values():
        assert s["excess_demand_s_total"] is None
        assert s["excess_demand_s_max_link"] is None
        assert s["links_with_excess"] is None
        assert s["mean_slowdown"] > 1  # the jobs were slowed
    assert data["excess_demand_s_per_link"] == {"themis": None, "themis+cassini": None}
    assert data["ratios"]["themis/themis+cassini"]["excess_demand_s_total"] is None
    report = data["report"]
    assert NOT_MEASURED in report["timeline_link_chosen"]
    assert "never" not in report["timeline_link_chosen"]
    assert "link_timeline.png" not in [p for p, _ in report["pictures"]]
    assert not (tmp_path / "link_timeline.png").exists()
    assert any(NOT_MEASURED in note for note in report["notes"])
    rows = [row for table in report["busiest_links"].values() for row in table]
    assert rows and all(row["excess_s"] is None for row in rows)
    page = (tmp_path / "report.html").read_text()
    assert NOT_MEASURED in page
    assert "never slowed" not in page and "no link was ever congested" not in page


# -- 2. a sweep's input error: refused up front, one line, on Ray as in the pool --------


def test_sweep_refuses_a_missing_trace_before_any_point_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("points ran"))
    monkeypatch.chdir(tmp_path)
    Path("miss.yaml").write_text(json.dumps(RECORDED | {"workload": {"trace": "nope.csv"}}))
    code, out, err = _cli(capsys, "sim", "sweep", "miss.yaml", "--out", "o", "--quiet")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "cassini sim: error: miss.yaml: trace: cannot read nope.csv: No such file or directory"
    ]
    assert not Path("o").exists()


def test_sweep_refuses_a_recorded_host_without_its_gpus_up_front(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("points ran"))
    _trace(tmp_path, ["a,0,4,20,vgg16,p0e0h0:2;p1e0h0:2", "d,10,3,20,vgg16,p3e1h1:3"])
    config = tmp_path / "sw.yaml"
    config.write_text(json.dumps(RECORDED | {"sweep": {"seed": [0, 1]}}))
    code, _, err = _cli(capsys, "sim", "sweep", str(config), "--out", str(tmp_path / "o"),
                        "--quiet", "--backend", "pool")  # fmt: skip
    assert code == 2
    assert err.splitlines() == [
        f"cassini sim: error: {config}: jobs.d.hosts: 3 GPUs on host 'p3e1h1', its server has 2"
    ]


@pytest.mark.slow
def test_a_point_failing_on_ray_raises_the_pools_one_line(tmp_path) -> None:
    """Ray's task error is itself an InputError whose message is Ray's coloured
    traceback (16 lines); the point's own error comes back instead, as the pool's."""
    require_module("ray", "make setup installs the [ray] extra")
    cfg = config_from_dict(RECORDED | {"workload": {"trace": "nope.csv"}}, base=tmp_path)
    with pytest.raises(InputError) as in_pool:
        sweep.run_sweep(cfg, backend="pool", workers=1)
    with pytest.raises(InputError) as on_ray:
        sweep.run_sweep(cfg, backend="ray", workers=1)
    assert type(on_ray.value) is InputError
    assert str(on_ray.value) == str(in_pool.value)
    assert "\n" not in str(on_ray.value) and "\x1b" not in str(on_ray.value)


class _Ray(_FakeRay):
    """The sweep tests' fake Ray whose ``init`` sets a SIGTERM handler of its own (as
    Ray's does) and may then fail."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail

    def init(self, **kwargs) -> None:
        signal.signal(signal.SIGTERM, lambda *a: None)
        if self.fail:
            raise RuntimeError("ray.init failed")


@pytest.fixture
def sigterm():
    """The process's SIGTERM handler, put back whatever a test left."""
    before = signal.getsignal(signal.SIGTERM)
    yield before
    signal.signal(signal.SIGTERM, before)


def test_on_ray_puts_handlers_back_when_init_fails(monkeypatch, sigterm) -> None:
    monkeypatch.setitem(sys.modules, "ray", _Ray(fail=True))
    cfg = config_from_dict(CONTENDED | {"sweep": {"seed": [0]}})
    with pytest.raises(RuntimeError, match="ray.init failed"):
        sweep.run_sweep(cfg, backend="ray")
    assert signal.getsignal(signal.SIGTERM) is sigterm


def test_on_ray_leaves_a_handler_not_set_from_python(monkeypatch, sigterm) -> None:
    """``signal.getsignal`` gives None for a handler set outside Python, which
    ``signal.signal`` refuses (TypeError) when the handlers are put back."""
    monkeypatch.setitem(sys.modules, "ray", _Ray())
    monkeypatch.setattr(sweep, "run_point", lambda cfg, p: [dict(p)])
    monkeypatch.setattr(signal, "getsignal", lambda s: None)
    cfg = config_from_dict(CONTENDED | {"sweep": {"seed": [0, 1]}})
    rows, backend = sweep.run_sweep(cfg, backend="ray")
    assert backend == "ray" and rows == [{"seed": 0}, {"seed": 1}]


# -- 3. sweep axes: integer seeds, no value twice ---------------------------------------


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ({"seed": [1.9]}, "sweep.seed[0]: must be an integer >= 0, got 1.9"),
        ({"seed": [0, 1.5]}, "sweep.seed[1]: must be an integer >= 0, got 1.5"),
        ({"seed": [0, 0]}, "sweep.seed[1]: 0 repeats sweep.seed[0]"),
        ({"load": [0.9, 0.5, 0.9]}, "sweep.load[2]: 0.9 repeats sweep.load[0]"),
        ({"oversubscription": [2, 2.0]}, "sweep.oversubscription[1]: 2.0 repeats"),
    ],
)
def test_sweep_axis_refuses_non_integer_seeds_and_repeats(axes, message) -> None:
    with pytest.raises(InputError) as e:
        config_from_dict(CONTENDED | {"sweep": axes})
    assert str(e.value).startswith(message)


def test_sweep_axis_takes_distinct_integer_seeds() -> None:
    cfg = config_from_dict(CONTENDED | {"sweep": {"seed": [0, 3], "load": [0.5, 1]}})
    assert cfg.sweep == {"seed": (0, 3), "load": (0.5, 1)}


# -- 4. a recorded trace naming all but a few of a generated topology's hosts ----------


def test_run_warns_when_some_trace_hosts_are_not_the_topologys(tmp_path) -> None:
    _trace(tmp_path, [
        "a,0,4,20,vgg16,p0e0h0:2;p1e0h0:2",
        "b,0,4,20,resnet50,p0e0h1:2;p1e0h1:2",
        "c,5,2,20,bert,p9e1h1:2",
    ])  # fmt: skip
    cfg = config_from_dict(RECORDED, base=tmp_path)
    lines = [w for w in run_warnings(cfg) if w.startswith("recorded placement")]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "'p9e1h1'" in lines[0] and "first appearance" in lines[0]
    assert "4 of the trace's 5 hosts" in lines[0]


def test_no_warning_when_all_or_none_of_the_hosts_match(tmp_path) -> None:
    cfg = config_from_dict(RECORDED, base=tmp_path)
    _trace(tmp_path, ["a,0,4,20,vgg16,p0e0h0:2;p1e0h0:2"])  # all: by name
    assert not [w for w in run_warnings(cfg) if w.startswith("recorded placement")]
    _trace(tmp_path, ["a,0,4,20,vgg16,10.0.0.1:2;10.0.0.2:2"])  # none: the documented rule
    assert not [w for w in run_warnings(cfg) if w.startswith("recorded placement")]
    no_recorded = replace(cfg, schedulers=("themis",))  # the trace's hosts are not used
    _trace(tmp_path, ["a,0,4,20,vgg16,p0e0h0:2;p9e9h9:2"])
    assert not [w for w in run_warnings(no_recorded) if w.startswith("recorded placement")]


def test_the_warning_names_three_unmatched_hosts_at_most(tmp_path) -> None:
    _trace(tmp_path, ["a,0,10,20,vgg16,p0e0h0:2;x1:2;x2:2;x3:2;x4:2"])
    cfg = config_from_dict(RECORDED, base=tmp_path)
    line = unmatched_hosts_warning(cfg.cluster, cfg.read_workload(cfg.library()).jobs)
    assert line is not None
    assert "'x1', 'x2', 'x3' and 1 more" in line and "'x4'" not in line


# -- 5. help and docs -------------------------------------------------------------------


def _sim_help(*sub: str) -> str:
    parser = cli.build_parser()
    for name in ("sim", *sub):
        action = next(a for a in parser._actions if a.choices and name in a.choices)
        parser = action.choices[name]
    return parser.format_help()


@pytest.mark.parametrize("sub", [(), ("run",), ("sweep",)])
def test_help_lists_every_network_model(sub) -> None:
    from cassini.sim.options import NETWORK_MODELS

    text = _sim_help(*sub)
    start = text.index("  network: ")
    block = text[start : text.index("\n  workload:", start)]
    for model in NETWORK_MODELS:
        assert model in block, (model, block)


def test_traces_doc_names_the_topo_show_command_that_lists_hosts() -> None:
    text = " ".join((ROOT / "docs" / "sim_traces.md").read_text().split())
    assert "`cassini topo show`" not in text
    assert "`cassini sim topo show CONFIG --json`" in text


def test_the_table_prints_a_dash_for_excess_not_measured():
    from cassini.sim.report.run import _excess_cell

    assert _excess_cell(float("nan")) == "-" and _excess_cell(1.25) == "1.2"


def test_a_generator_a_worker_lacks_is_not_blamed_on_the_axis(monkeypatch):
    """On Ray, a generator registered at run time is unknown in the workers: the point's
    rebuild failed with "unknown generator", and the sweep said the cluster "cannot take
    this axis" (oversubscription), which it can (the pool backend ran it)."""
    from cassini.sim.topologies import registry
    from cassini.sim.topologies.clos import two_tier

    @functools.wraps(two_tier)  # two-tier's parameters, and a source that names "mine"
    def mine(**given):
        made = two_tier(**given)
        return replace(made, source={**made.source, "generate": "mine"})

    monkeypatch.setitem(registry.GENERATORS, "mine", mine)
    cfg = config_from_dict(
        {
            "cluster": {"generate": "mine", "racks": 2, "servers_per_rack": 2,
                        "gpus_per_server": 1},  # fmt: skip
            "workload": {"poisson": {"jobs": 2, "load": 0.5, "gpus": {2: 1}}},
            "schedulers": ["themis"],
        }
    )
    assert sweep.point_config(cfg, {"oversubscription": 4.0}).cluster is not cfg.cluster
    monkeypatch.delitem(registry.GENERATORS, "mine")  # as in a Ray worker
    with pytest.raises(InputError) as e:
        sweep.point_config(cfg, {"oversubscription": 4.0})
    assert e.value.field == "cluster.generate" and "unknown generator 'mine'" in e.value.problem
