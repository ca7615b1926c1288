"""The testbed run's value types without root: the worker spec the runner writes and both
workers read, the link-direction keys, and each rank's spec from a schedule."""

import copy
import json
import pickle
from dataclasses import replace

import pytest

from cassini.errors import InputError
from testbed import releaseboard
from testbed.ddp_worker import torchrun_spec
from testbed.results import JobDirection
from testbed.run import load_config
from testbed.run.session import BASE_PORT, Schedule, worker_spec
from testbed.topo import LinkDirection, dumbbell
from testbed.workerspec import WorkerSpec

CONFIG = {
    "topology": {"kind": "dumbbell", "pairs": 2, "bottleneck_bps": 2e8, "fabric": "fair"},
    "jobs": [
        {"id": "a", "hosts": ["h1", "h3"], "iterations": 5, "compute_s": 0.04},
        {"id": "b", "hosts": ["h2", "h4"], "iterations": 6, "bytes": 2000, "jitter": 0.1},
    ],
    "schemes": ["baseline"],
    "seed": 7,
}


def test_worker_spec_reads_back_what_it_writes(tmp_path):
    spec = WorkerSpec("a", 1, 2, 10, "/x/a-rank1.jsonl", addrs=("10.0.0.1", "10.0.0.3"))
    assert WorkerSpec.from_json(spec.to_json()) == spec
    spec.dump(tmp_path / "s.json")
    assert WorkerSpec.load(tmp_path / "s.json") == spec
    assert json.loads(spec.to_json())["addrs"] == ["10.0.0.1", "10.0.0.3"]


@pytest.mark.parametrize(
    ("edit", "field"),
    [(lambda o: o.update(colour=1), "colour"), (lambda o: o.pop("rank"), "rank")],
    ids=["unknown", "missing"],
)
def test_worker_spec_names_a_bad_field(edit, field):
    obj = json.loads(WorkerSpec("a", 0, 2, 3, "o").to_json())
    edit(obj)
    with pytest.raises(InputError, match=f"^{field}:"):
        WorkerSpec.from_json(json.dumps(obj))


def test_only_one_rank_marks_mltcp_iterations_unless_told():
    base = WorkerSpec("a", 0, 2, 3, "o", mltcp_job="a@1")
    assert base.marks_iterations and not replace(base, rank=1).marks_iterations
    assert replace(base, rank=1, mltcp_marker=True).marks_iterations
    assert not replace(base, mltcp_job=None).marks_iterations


def test_each_rank_gets_its_jobs_fields_and_the_held_jobs_period(tmp_path):
    cfg = load_config(CONFIG)
    a, b = cfg.jobs
    free = worker_spec(cfg, b, 1, 1, Schedule({"b": 0.03}), tmp_path / "b1.jsonl", tmp_path / "go")
    assert (free.job_id, free.rank, free.world_size, free.iterations) == ("b", 1, 2, 6)
    assert free.addrs == ("10.0.0.2", "10.0.0.4") and free.iface == "h4-eth0"
    assert free.port == BASE_PORT + 1 and free.seed == 8
    assert (free.bytes, free.jitter, free.shift_s) == (2000, 0.1, 0.03)
    assert free.period_s is None and free.tolerance_s is None
    assert free.start_gate == str(tmp_path / "go") and free.out == str(tmp_path / "b1.jsonl")
    held = Schedule({"a": 0.25}, {"a": 0.1}, {"a": 0.005})
    spec = worker_spec(cfg, a, 0, 0, held, tmp_path / "a0.jsonl", tmp_path / "go")
    assert spec.period_s == 0.1 and spec.tolerance_s == 0.005
    assert spec.shift_s == pytest.approx(0.05)  # within the period
    assert spec.compute_s == 0.04 and spec.kind == "synthetic"
    assert WorkerSpec.from_json(spec.to_json()) == spec
    assert spec.partners == () and spec.release_board == str(tmp_path / "released")
    assert free.release_board is None and free.partners == ()
    pair = Schedule({"a": 0.0, "b": 0.05}, {"a": 0.1, "b": 0.1})
    spec_b = worker_spec(cfg, b, 1, 0, pair, tmp_path / "b0.jsonl", tmp_path / "go")
    assert spec_b.partners == ("a",)  # released together with the other held job
    assert WorkerSpec.from_json(spec_b.to_json()) == spec_b


def test_release_board_round_trip(tmp_path):
    board = tmp_path / "released"
    assert releaseboard.released_jobs(board, ["a", "b"]) == set()
    releaseboard.announce(board, "a", "missed its slot 3 times")
    assert releaseboard.released_jobs(board, ["a", "b"]) == {"a"}
    assert releaseboard.reason(board, "a") == "missed its slot 3 times"
    assert releaseboard.reason(board, "b") is None
    assert sorted(p.name for p in board.iterdir()) == ["a"]  # no temporary left


def test_torchrun_ranks_get_the_same_spec_type(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("MLTCP_JOB", raising=False)
    spec = torchrun_spec(["--iterations", "7", "--width", "64", "--period-s", "0.2"])
    assert (spec.kind, spec.rank, spec.world_size, spec.iterations) == ("ddp", 1, 2, 7)
    assert spec.width == 64 and spec.period_s == 0.2 and spec.addrs == ()
    assert spec.out == "ddp.jsonl.rank1" and spec.backend == "nccl"
    assert not spec.marks_iterations and spec.compute_s == 0.0
    assert torchrun_spec([]).period_s is None  # no period: the agent stays off


def test_link_directions_are_typed_and_read_back():
    topo = dumbbell(2, 2e8)
    path = topo.path("h1", "h3")
    assert all(isinstance(d, LinkDirection) for d in path)
    assert [(d.src, d.dst) for d in path] == [("h1", "tbs1"), ("tbs1", "tbs2"), ("tbs2", "h3")]
    d = path[1]
    assert d == "tbs1->tbs2" and LinkDirection.parse("tbs1->tbs2") == d
    assert copy.deepcopy(d) == d and pickle.loads(pickle.dumps(d)).dst == "tbs2"
    with pytest.raises(ValueError, match="src->dst"):
        LinkDirection.parse("tbs1")
    key = JobDirection("a", d)
    assert key == "a:tbs1->tbs2" and JobDirection.parse(key).direction.src == "tbs1"
    assert JobDirection.parse(key).job_id == "a" and json.dumps({key: 1}) == '{"a:tbs1->tbs2": 1}'
