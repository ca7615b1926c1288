"""Schedulers of the simulated cluster: who runs next, on how many GPUs, and where.

A scheduler is a *policy* (which queued job runs next and on how many GPUs) plus a
*placement* stage (which of N candidate placements it takes):

* ``themis`` — finish-time fairness, simplified from Themis (NSDI 2020): queued jobs bid
  in order of their finish-time fairness rho = (waited + dedicated run time) /
  dedicated run time, worst-treated first; a job that does not fit is skipped
  (backfilling); no leases or preemption.
* ``pollux`` — goodput, simplified from Pollux (OSDI 2021): a job gets twice the GPUs it
  asked for when nobody else waits and they are free, half of them when the cluster is
  short, whichever gives more goodput (GPUs x statistical efficiency, efficiency
  ``1 / (1 + EFFICIENCY_LOSS * (scale - 1))`` above the asked-for batch); its
  iterations scale so that it trains the same number of samples; no re-allocation.

Placements: the policy's own choice (packed: fewest racks, then fewest servers) is the
first of up to N candidates; the others start packing from other racks or take random
free GPUs.  ``+cassini`` picks among the candidates with :func:`cassini.plugin.
choose_placement` and applies its time-shifts; ``+random`` picks a random candidate;
``ideal`` is Themis on a dedicated network (no contention at all).

``recorded`` replays a trace's own placement (:mod:`cassini.sim.recorded`): jobs in
arrival order, each on exactly the hosts the trace names, once their GPUs are free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cassini.errors import InputError
from cassini.sim.topology import Cluster
from cassini.sim.workload import JobSpec

POLICIES = ("themis", "pollux", "recorded")
PLACEMENTS = ("first", "random", "cassini")
#: Statistical-efficiency loss per doubling-equivalent of batch size (Pollux-like policy).
EFFICIENCY_LOSS = 0.25


@dataclass(frozen=True)
class Scheduler:
    """A scheduler's name split into its parts: ``policy`` (themis, pollux),
    ``placement`` (first, random, cassini) and ``dedicated_network`` (ideal)."""

    name: str
    policy: str
    placement: str
    dedicated_network: bool = False

    @classmethod
    def parse(cls, name: str) -> Scheduler:
        """``themis``, ``themis+cassini``, ``pollux+random``, ``ideal``, ..."""
        if name == "ideal":
            return cls(name, "themis", "first", dedicated_network=True)
        policy, _, placement = name.partition("+")
        placement = placement or "first"
        if policy not in POLICIES or placement not in PLACEMENTS[1:] + ("first",):
            raise InputError(
                "schedulers",
                f"unknown scheduler {name!r} (policies {', '.join(POLICIES)}, each optionally "
                "+cassini or +random; or ideal)",
            )
        return cls(name, policy, placement)


@dataclass(frozen=True)
class Decision:
    """The policy's decision for one queued job: run it on ``gpus`` GPUs for
    ``iterations`` iterations."""

    job: JobSpec
    gpus: int
    iterations: int


def finish_time_fairness(job: JobSpec, now_s: float, dedicated_run_s: float) -> float:
    """Themis' rho for a job still waiting: its finish time if started now over its
    finish time on a dedicated cluster started at arrival (>= 1)."""
    return (now_s - job.arrival_s + dedicated_run_s) / dedicated_run_s


def statistical_efficiency(scale: float) -> float:
    """Fraction of a sample's progress kept at ``scale`` times the asked-for batch."""
    return 1.0 if scale <= 1 else 1.0 / (1.0 + EFFICIENCY_LOSS * (scale - 1.0))


def decide(
    policy: str,
    queue: Sequence[JobSpec],
    free_gpus: int,
    now_s: float,
    iteration_time_s: Mapping[str, float],
) -> list[Decision]:
    """Order the queue and size each job; the engine places them in this order while
    they fit.  ``iteration_time_s`` is each model's dedicated iteration time (s)."""
    if policy == "themis":
        ranked = sorted(
            queue,
            key=lambda j: (
                -finish_time_fairness(j, now_s, j.iterations * iteration_time_s[j.model]),
                j.arrival_s,
            ),
        )
        return [Decision(j, j.gpus, j.iterations) for j in ranked]
    if policy == "recorded":  # the trace's own order and sizes
        return [Decision(j, j.gpus, j.iterations) for j in sorted(queue, key=lambda j: j.arrival_s)]
    if policy == "pollux":
        out = []
        budget = free_gpus
        for k, j in enumerate(sorted(queue, key=lambda j: j.arrival_s)):
            options = [j.gpus]
            if k == len(queue) - 1 and budget >= 2 * j.gpus:
                options.append(2 * j.gpus)
            if budget < j.gpus and j.gpus > 1:
                options.append(max(1, j.gpus // 2))
            fits = [g for g in options if g <= budget] or [j.gpus]
            g = max(fits, key=lambda g: (g * statistical_efficiency(g / j.gpus), -g))
            scale = g / j.gpus
            iters = math.ceil(j.iterations / (scale * statistical_efficiency(scale)))
            out.append(Decision(j, g, max(1, iters)))
            budget -= g
        return out
    raise InputError("policy", f"unknown policy {policy!r}")


def candidate_placements(
    cluster: Cluster,
    free: np.ndarray,
    gpus: int,
    n_candidates: int,
    rng: np.random.Generator,
) -> list[dict[int, int]]:
    """Up to ``n_candidates`` distinct placements ``{server: gpus}`` of ``gpus`` GPUs on
    the free GPUs ``free`` (one count per server); empty when they do not fit.

    The first is packed (one server if one has room; else the racks with the most free
    GPUs first, inside a rack the fullest servers first); then packings that start from
    other racks; then random picks of servers with free GPUs."""
    if gpus > int(free.sum()):
        return []
    fit = np.flatnonzero(free >= gpus)
    if len(fit):  # fits on one server: best fit, no network at all
        best = fit[np.argmin(free[fit])]
        return [{int(best): gpus}]
    spr = cluster.servers_per_rack
    rack_free = free.reshape(cluster.racks, spr).sum(axis=1)
    rack_order = [int(r) for r in np.argsort(-rack_free, kind="stable") if rack_free[r] > 0]
    out: list[dict[int, int]] = []
    seen: set[tuple[tuple[int, int], ...]] = set()

    def add(placement: dict[int, int] | None) -> None:
        if placement is None:
            return
        key = tuple(sorted(placement.items()))
        if key not in seen:
            seen.add(key)
            out.append(placement)

    for first in rack_order:
        if len(out) >= n_candidates:
            return out
        add(_pack(free, spr, [first] + [r for r in rack_order if r != first], gpus))
    servers = np.flatnonzero(free > 0)
    for _ in range(4 * n_candidates):
        if len(out) >= n_candidates:
            break
        placement, need = {}, gpus
        for s in rng.permutation(servers):
            take = int(min(free[s], need))
            placement[int(s)] = take
            need -= take
            if need == 0:
                break
        add(placement)
    return out


def _pack(free: np.ndarray, spr: int, racks: list[int], gpus: int) -> dict[int, int] | None:
    placement, need = {}, gpus
    for r in racks:
        servers = range(r * spr, (r + 1) * spr)
        for s in sorted(servers, key=lambda s: (-free[s], s)):
            if need == 0:
                return placement
            take = int(min(free[s], need))
            if take:
                placement[s] = take
                need -= take
    return placement if need == 0 else None
