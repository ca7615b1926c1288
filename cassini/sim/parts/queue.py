"""Queue policies: which queued job runs next, on how many GPUs, for how many iterations."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cassini.sim.workload import JobSpec

#: Statistical-efficiency loss per doubling-equivalent of batch size (Pollux-like policy).
EFFICIENCY_LOSS = 0.25


@dataclass(frozen=True)
class Decision:
    """The policy's decision for one queued job: run it on ``gpus`` GPUs for
    ``iterations`` iterations."""

    job: JobSpec
    gpus: int
    iterations: int


QueuePolicy = Callable[[Sequence[JobSpec], int, float, Mapping[str, float]], list[Decision]]


def finish_time_fairness(job: JobSpec, now_s: float, dedicated_run_s: float) -> float:
    """Themis' rho for a job still waiting: its finish time if started now over its
    finish time on a dedicated cluster started at arrival (>= 1)."""
    return (now_s - job.arrival_s + dedicated_run_s) / dedicated_run_s


def statistical_efficiency(scale: float) -> float:
    """Fraction of a sample's progress kept at ``scale`` times the asked-for batch."""
    return 1.0 if scale <= 1 else 1.0 / (1.0 + EFFICIENCY_LOSS * (scale - 1.0))


def themis(
    queue: Sequence[JobSpec], free_gpus: int, now_s: float, iteration_time_s: Mapping[str, float]
) -> list[Decision]:
    ranked = sorted(
        queue,
        key=lambda j: (
            -finish_time_fairness(j, now_s, j.iterations * iteration_time_s[j.model]),
            j.arrival_s,
        ),
    )
    return [Decision(j, j.gpus, j.iterations) for j in ranked]


def pollux(
    queue: Sequence[JobSpec], free_gpus: int, now_s: float, iteration_time_s: Mapping[str, float]
) -> list[Decision]:
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


def fifo(
    queue: Sequence[JobSpec], free_gpus: int, now_s: float, iteration_time_s: Mapping[str, float]
) -> list[Decision]:
    out, budget = [], free_gpus
    for j in sorted(queue, key=lambda j: (j.arrival_s, j.job_id)):
        if j.gpus > budget:
            break
        out.append(Decision(j, j.gpus, j.iterations))
        budget -= j.gpus
    return out


def las(
    queue: Sequence[JobSpec], free_gpus: int, now_s: float, iteration_time_s: Mapping[str, float]
) -> list[Decision]:
    ranked = sorted(queue, key=lambda j: (0.0, j.gpus, j.arrival_s, j.job_id))
    return [Decision(j, j.gpus, j.iterations) for j in ranked]


def recorded(
    queue: Sequence[JobSpec], free_gpus: int, now_s: float, iteration_time_s: Mapping[str, float]
) -> list[Decision]:
    """A trace's own order and sizes (arrival order); the engine puts each job on the
    hosts its trace names (:mod:`cassini.sim.recorded`)."""
    ranked = sorted(queue, key=lambda j: (j.arrival_s, j.job_id))  # as recorded.host_servers
    return [Decision(j, j.gpus, j.iterations) for j in ranked]


#: name -> policy.  Add one: a function with the signature above and an entry here.
QUEUE_POLICIES: dict[str, QueuePolicy] = {
    "themis": themis,
    "pollux": pollux,
    "fifo": fifo,
    "las": las,
    "recorded": recorded,
}
