"""A newcomer's review of the ``testbed`` command (2026-11-29), on the real kernel: a
crashed run's leftover link, a Ctrl-C during the cluster's bring-up, and two ``ideal``
schemes run with a relative ``--out``.  Needs root and Mininet; with CI=true a missing
prerequisite fails instead of skipping."""

import json
import subprocess

import pytest
from test_testbed_newcomer2 import CONFIG  # the same two-job dumbbell

from testbed import cli
from testbed.net import leftovers
from testbed.results import ExperimentResult

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("testbed_host")]


def write_config(tmp_path, **changes):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**CONFIG, **changes}))
    return path


def test_a_leftover_link_stops_the_run_in_one_line_and_stays(tmp_path, capsys):
    """``timeout -s KILL`` left tbs1-eth3/tbs2-eth3; the next run died in a Mininet
    traceback ("RTNETLINK answers: File exists") and deleted only the bridges."""
    # a crashed run's veth pair between its switches (we hold the host lock: no run's now)
    pair = ["tbs1-eth9", "tbs2-eth9"]
    subprocess.run(["ip", "link", "add", pair[0], "type", "veth", "peer", "name", pair[1]],
                   check=True)  # fmt: skip
    try:
        assert sorted(leftovers()) == pair
        assert cli.main(["run", str(write_config(tmp_path)), "--out", str(tmp_path / "o")]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("testbed: error: leftovers of an earlier run (tbs")
        assert err[-1].endswith("): run 'sudo testbed cleanup'") and all(p in err[-1] for p in pair)
        assert "Traceback" not in "\n".join(err)
        assert sorted(leftovers()) == pair  # left for cleanup to remove, not half-removed
    finally:
        subprocess.run(["ip", "link", "del", pair[0]], check=False)


def test_ctrl_c_while_a_bridge_comes_up_is_an_interrupt_not_an_assertion(
    tmp_path, monkeypatch, capsys
):
    """Ctrl-C in Mininet's LinuxBridge.start (its shell left waiting for ``brctl``):
    AssertionError from net.stop(), exit 1, in 5 of 6 tries."""
    from mininet.nodelib import LinuxBridge

    started = LinuxBridge.start

    def start(self, controllers):
        if self.name == "tbs2":  # as Ctrl-C lands while Mininet waits for the shell
            self.sendCmd("sleep 0.2")
            raise KeyboardInterrupt
        return started(self, controllers)

    monkeypatch.setattr(LinuxBridge, "start", start)
    assert cli.main(["run", str(write_config(tmp_path)), "--out", str(tmp_path / "o")]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "testbed: interrupted; the cluster was torn down", err
    assert "Traceback" not in "\n".join(err) and leftovers() == []


def test_two_ideal_schemes_with_a_relative_out(tmp_path, monkeypatch, capsys):
    """``schemes: [ideal, {scheme: ideal, name: ideal_reno, cc: reno}]`` wrote both into
    OUT/ideal-a/; ``--out relout`` stored 'relout/...' log paths a reader elsewhere could
    not open."""
    reno = {"scheme": "ideal", "name": "ideal_reno", "cc": "reno"}
    path = write_config(tmp_path, schemes=["ideal", reno])
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", str(path), "--out", "relout"]) == 0
    capsys.readouterr()
    monkeypatch.chdir("/")
    results = tmp_path / "relout" / "results.json"
    stored = json.loads(results.read_text())
    assert stored["complete"] is True
    for name in ("ideal", "ideal_reno"):
        for job in ("a", "b"):
            logs = stored["schemes"][name]["jobs"][job]["logs"]
            assert logs == [f"{name}/{job}/{job}-rank0.jsonl", f"{name}/{job}/{job}-rank1.jsonl"]
    res = ExperimentResult.read(results)
    cubic, reno_run = res.schemes["ideal"].jobs["a"], res.schemes["ideal_reno"].jobs["a"]
    assert res.schemes["ideal_reno"].cc == "reno" and res.schemes["ideal"].cc != "reno"
    assert cubic.logs[0] != reno_run.logs[0]
    assert [r["iter"] for r in cubic.records()] == list(range(5))
    assert [r["iter"] for r in reno_run.records()] == list(range(5))
    # each entry reads its own run's records: the rank-0 times it reports
    for job in (cubic, reno_run):
        ends = [r["end"] for r in job.records()]
        assert [b - a for a, b in zip(ends, ends[1:], strict=False)] == pytest.approx(
            list(job.iteration_times_s)
        )
