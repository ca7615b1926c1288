"""MonkeyTree-style defragmentation: moves only into fewer racks, charges every move,
never moves a job twice inside its cooldown."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cassini.sim import engine as engine_module
from cassini.sim.engine import Simulation
from cassini.sim.options import SimOptions
from cassini.sim.parts.placement import defrag_move, racks_needed
from cassini.sim.topology import Cluster
from cassini.sim.workload import load_library, poisson_jobs

LIBRARY = load_library()


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_move_brings_a_job_into_fewer_racks_on_free_gpus(data) -> None:
    c = Cluster(racks=4, servers_per_rack=2, gpus_per_server=4)
    free = np.array(data.draw(st.lists(st.integers(0, 4), min_size=8, max_size=8)))
    used = [s for s in range(8) if free[s] < 4]
    if not used:
        return
    taken = data.draw(st.lists(st.sampled_from(used), min_size=1, max_size=len(used), unique=True))
    placement = {s: int(data.draw(st.integers(1, 4 - int(free[s])))) for s in taken}
    move = defrag_move(c, free, placement)
    racks = len({c.rack_of(s) for s in placement})
    if move is None:
        return
    new, moved = move
    assert sum(new.values()) == sum(placement.values())
    assert racks_needed(c, sum(new.values())) <= len({c.rack_of(s) for s in new}) < racks
    for s, g in new.items():
        assert g <= free[s] + placement.get(s, 0)
    assert moved == sum(max(0, g - placement.get(s, 0)) for s, g in new.items()) > 0


def test_defrag_charges_every_move_and_respects_the_cooldown(monkeypatch) -> None:
    # ECMP over 4 spines slows cross-rack jobs, so moves into fewer racks pay back
    c = Cluster(racks=8, servers_per_rack=4, gpus_per_server=4, spines=4)
    jobs = poisson_jobs(
        80, 0.9, c.gpus, LIBRARY, gpus={4: 1, 12: 1, 24: 1, 40: 1}, iterations=(2000, 8000), seed=2
    )
    options = SimOptions(routing="ecmp", migration_s=9.0, cooldown_s=400.0)
    moves: list[tuple[str, float, float, int]] = []  # job, time, stall added, workers
    original = Simulation._defragment

    def spy(self):
        before = {
            j: (r.migrations, r.migration_s, set(r.placement)) for j, r in self.running.items()
        }
        out = original(self)
        for j, (n, charged, servers) in before.items():
            r = self.running[j]
            if r.migrations > n:
                workers = sum(1 for s in r.placement if s not in servers)
                moves.append((j, self.now, r.migration_s - charged, workers))
        return out

    monkeypatch.setattr(Simulation, "_defragment", spy)
    result = Simulation(c, jobs, LIBRARY, "themis+defrag", seed=2, options=options).run()
    assert moves, "the workload should fragment enough to migrate"
    last: dict[str, float] = {}
    for job, t, charged, workers in moves:
        assert charged == pytest.approx(9.0 * workers) and workers > 0
        assert t - last.get(job, -np.inf) >= 400.0
        last[job] = t
    summary = result.summary()
    assert summary["migrations"] == len(moves)
    assert summary["migration_s_total"] == pytest.approx(sum(m[2] for m in moves))
    # a stalled job finishes later than its iterations alone would take it
    for rec in result.jobs:
        if rec.migrations:
            assert rec.finish_s - rec.start_s >= rec.migration_s + rec.iterations * (
                rec.dedicated_iteration_s * (1 - 1e-9)
            )
    assert engine_module.SimOptions().migration_s == 9.0
