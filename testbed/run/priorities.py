"""Each job's class on the ``prio`` fabric: the config's ``priority`` where given, else
Crux's rule (GPU intensity compressed to the fabric's levels by the max-K-cut over the
jobs that share a fabric link), computed by :func:`cassini.priority.crux_levels`, the
function the simulator's priority sharing calls too."""

from __future__ import annotations

import numpy as np

from cassini.priority import crux_levels, intensity
from testbed.fabric import PRIORITY_LEVELS
from testbed.run.config import RunConfig, TestbedJob


def job_bits_and_compute(job: TestbedJob) -> tuple[float, float]:
    """Bits a rank sends per iteration in its ring all-reduce, and its compute seconds
    per iteration (the calibrated replay for a model job)."""
    n = len(job.hosts)
    if job.kind == "model":
        from testbed.calibration import load_calibration
        from testbed.replay import scaled_gradient_bytes

        cal = load_calibration(job.calibration)
        nbytes, compute_s = scaled_gradient_bytes(cal, job.scale), cal.replay_iteration_s
    else:
        nbytes, compute_s = job.bytes, job.compute_s
    return 2 * (n - 1) / n * nbytes * 8, compute_s


def job_intensity(cfg: RunConfig, job: TestbedJob) -> float:
    """Crux's GPU intensity of ``job`` (one GPU per host) over its slowest ring link."""
    capacity = cfg.topology.link_capacity()
    slowest = min(capacity[d] for d in cfg.topology.ring_links(job.hosts))
    bits, compute_s = job_bits_and_compute(job)
    return intensity(len(job.hosts), compute_s, bits, slowest)


def job_levels(cfg: RunConfig, k: int = PRIORITY_LEVELS) -> dict[str, int]:
    """Priority 0 (highest) .. k-1 of every job: its configured ``priority``, else the
    level Crux's rule gives it among all the run's jobs (seeded by the run's seed)."""
    fabric_links = {d for link in cfg.topology.bottlenecks() for d in link.directions()}
    shared = {j.job_id: set(cfg.topology.ring_links(j.hosts)) & fabric_links for j in cfg.jobs}
    intensities = {j.job_id: job_intensity(cfg, j) for j in cfg.jobs}
    levels, _, _ = crux_levels(intensities, shared, k, np.random.default_rng([cfg.seed, 1]))
    return {j.job_id: j.priority if j.priority is not None else levels[j.job_id] for j in cfg.jobs}


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.run.priorities")
