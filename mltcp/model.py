"""Reference fluid model: N periodic jobs on one bottleneck, with and without MLTCP.

Each job computes for ``compute_s`` seconds, then moves its iteration's bytes, which take
``comm_s`` seconds at the full link rate.  Jobs communicating at the same time share the
link in proportion to a weight:

- ``fair``   — equal shares: DCQCN/DCTCP (and Reno at equal RTTs) once converged;
- ``mltcp``  — MLTCP on a fair-sharing base: AIMD whose additive increase is scaled by F
  gets a share proportional to F, ``F = slope * ratio + intercept`` with ``ratio`` the
  fraction of the iteration's bytes already sent;
- ``mltcp-scale-cut`` — MLTCP on DCTCP with the window cut divided by F as well
  (``MltcpParams.scale_cut``, the default): grow F per RTT, cut ``w * alpha / (2 F)``,
  for a share proportional to F^2;
- ``mltcp-cubic`` — CUBIC's growth scaled by F: its window grows as F^(1/4) of the cubic
  constant's, for a share proportional to F^0.75 (steady-state CUBIC, same RTTs).

:func:`policy_of` names the policy a congestion control and its parameters call for.

The state of ``configs`` independent scenarios advances together in numpy arrays (one
row per scenario), so sweeps of thousands of configurations take seconds.  Pure logic:
no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mltcp import variants
from mltcp.policy import MltcpParams

#: the congestion control whose window cut ``MltcpParams.scale_cut`` divides by F
#: (``ebpf/dctcp.bpf.c`` built with ``DCTCP_MLTCP``)
SCALE_CUT_CC = "mltcp_dctcp"

#: MLTCP policies: share proportional to F to this power
GAMMA = {"mltcp": 1.0, "mltcp-scale-cut": 2.0, "mltcp-cubic": 0.75}
POLICIES = ("fair", *GAMMA)


def policy_of(cc: str, params: MltcpParams) -> str:
    """The model policy (:data:`POLICIES`) for congestion control ``cc`` running with
    ``params``: ``mltcp-cubic`` for ``mltcp_cubic``, ``mltcp-scale-cut`` for
    ``mltcp_dctcp`` with ``params.scale_cut`` (the default; the only control that reads
    the flag), ``mltcp`` for the other MLTCP controls, ``fair`` for a control without
    MLTCP (``dctcp_bpf``, the kernel's own)."""
    v = variants.by_cc(cc)
    if v is None or not v.cc.startswith("mltcp_"):
        return "fair"
    if v.base == "cubic":
        return "mltcp-cubic"
    if v.cc == SCALE_CUT_CC and params.scale_cut:
        return "mltcp-scale-cut"
    return "mltcp"


@dataclass(frozen=True)
class ModelResult:
    """Per scenario and job: iteration times (seconds, shape configs x jobs x iterations),
    communication start times (same shape), and per scenario the overlap of the first two
    jobs' communication phases per iteration (fraction of job 0's phase, configs x
    iterations)."""

    iteration_times_s: np.ndarray
    comm_starts_s: np.ndarray
    overlap: np.ndarray

    def iterations_to_interleave(self, threshold: float = 0.05, hold: int = 3) -> np.ndarray:
        """First iteration from which the overlap stays below ``threshold`` for ``hold``
        iterations; -1 where that never happens."""
        below = self.overlap < threshold
        n = below.shape[1]
        out = np.full(below.shape[0], -1)
        for k in range(n - hold + 1):
            ok = below[:, k : k + hold].all(axis=1) & (out < 0)
            out[ok] = k
        return out


def simulate(
    compute_s: np.ndarray,
    comm_s: np.ndarray,
    start_s: np.ndarray,
    iterations: int,
    policy: str = "fair",
    slope: float | np.ndarray = 1.0,
    intercept: float | np.ndarray = 0.5,
    dt_s: float | None = None,
) -> ModelResult:
    """Run the fluid model.

    Parameters
    ----------
    compute_s, comm_s : seconds, shape (configs, jobs) (or (jobs,) for one scenario).
    start_s : when each job starts computing, seconds, same shape.
    iterations : iterations to record per job.
    policy : one of :data:`POLICIES`.
    slope, intercept : MLTCP parameters (scalars or per-scenario arrays).
    dt_s : time step; default 1/400 of the shortest communication phase.

    Returns
    -------
    ModelResult.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    compute, comm, start = _scenarios(compute_s, comm_s, start_s)
    m, n = comm.shape
    slope, intercept = _rule(slope, intercept, m)
    dt = dt_s or float(comm.min()) / 400
    gamma = GAMMA.get(policy, 1.0)

    t = 0.0
    waiting = start.copy()  # seconds until the job starts computing
    computing = np.zeros((m, n))  # compute seconds left (0 = not computing)
    left = np.zeros((m, n))  # communication seconds-at-full-rate left
    active = np.zeros((m, n), bool)  # communicating
    count = np.zeros((m, n), int)
    last_end = start.copy()
    times = np.full((m, n, iterations), np.nan)
    starts = np.full((m, n, iterations), np.nan)
    ends = np.full((m, n, iterations), np.nan)
    rows = np.arange(m)[:, None]
    cols = np.arange(n)[None, :]
    horizon = float(((compute + comm).max() * n) * (iterations + 2) + start.max())
    begun = np.zeros((m, n), bool)
    while t < horizon and (count < iterations).any():
        # jobs whose start time came begin computing
        start_now = ~begun & (waiting <= t)
        computing = np.where(start_now, compute, computing)
        begun |= start_now
        # compute phases that end begin communicating
        computing_now = begun & ~active & (count < iterations)
        computing = np.where(computing_now, computing - dt, computing)
        to_comm = computing_now & (computing <= 0)
        if to_comm.any():
            k = np.minimum(count, iterations - 1)
            starts[rows, cols, k] = np.where(to_comm, t, starts[rows, cols, k])
            left = np.where(to_comm, comm, left)
            active |= to_comm
        # share the link
        if policy == "fair":
            weight = active.astype(float)
        else:
            weight = _mltcp_weight(active, left, comm, slope, intercept, gamma)
        left = left - _shares(weight) * dt
        done = active & (left <= 0)
        if done.any():
            k = np.minimum(count, iterations - 1)
            end_t = t + dt
            times[rows, cols, k] = np.where(done, end_t - last_end, times[rows, cols, k])
            ends[rows, cols, k] = np.where(done, end_t, ends[rows, cols, k])
            last_end = np.where(done, end_t, last_end)
            count = count + done
            active &= ~done
            computing = np.where(done, compute, computing)
        t += dt
    overlap = _overlap(starts, ends) if n > 1 else np.zeros((m, iterations))
    return ModelResult(times, starts, overlap)


def _scenarios(
    compute_s: np.ndarray, comm_s: np.ndarray, start_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compute, communication and start times (seconds) as (configs, jobs) arrays, checked
    to have one shape, communication > 0 and compute >= 0."""
    compute = np.atleast_2d(np.asarray(compute_s, float))
    comm = np.atleast_2d(np.asarray(comm_s, float))
    start = np.atleast_2d(np.asarray(start_s, float))
    if not (compute.shape == comm.shape == start.shape):
        raise ValueError("compute_s, comm_s and start_s must have the same shape")
    if np.any(comm <= 0) or np.any(compute < 0):
        raise ValueError("comm_s must be > 0 and compute_s >= 0")
    return compute, comm, start


def _rule(
    slope: float | np.ndarray, intercept: float | np.ndarray, configs: int
) -> tuple[np.ndarray, np.ndarray]:
    """MLTCP's slope and intercept as (configs, 1) columns, checked: intercept > 0,
    slope >= 0."""
    slope = np.broadcast_to(np.asarray(slope, float), (configs,))[:, None]
    intercept = np.broadcast_to(np.asarray(intercept, float), (configs,))[:, None]
    if np.any(intercept <= 0) or np.any(slope < 0):
        raise ValueError("need intercept > 0 and slope >= 0")
    return slope, intercept


def _mltcp_weight(
    active: np.ndarray,
    left: np.ndarray,
    comm: np.ndarray,
    slope: np.ndarray,
    intercept: np.ndarray,
    gamma: float,
) -> np.ndarray:
    """Each communicating job's weight F ** gamma, F = slope * ratio + intercept with ratio
    the fraction of its phase done (``left`` and ``comm`` in seconds at full rate); 0 for
    a job not communicating."""
    ratio = np.clip(1 - left / comm, 0, 1)
    return np.where(active, (slope * ratio + intercept) ** gamma, 0.0)


def _shares(weight: np.ndarray) -> np.ndarray:
    """Each communicating job's fraction of the link: its weight over its scenario's total
    (0 in a scenario where no one communicates)."""
    total = weight.sum(axis=1, keepdims=True)
    return np.divide(weight, total, out=np.zeros_like(weight), where=total > 0)


def _overlap(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Fraction of job 0's k-th communication phase during which job 1 also communicates
    (any of its phases)."""
    a0, a1 = starts[:, 0, :, None], ends[:, 0, :, None]
    b0, b1 = starts[:, 1, None, :], ends[:, 1, None, :]
    inter = np.clip(np.minimum(a1, b1) - np.maximum(a0, b0), 0, None)
    inter = np.nan_to_num(inter).sum(axis=2)
    length = np.nan_to_num(ends[:, 0] - starts[:, 0])
    return np.divide(inter, length, out=np.zeros_like(inter), where=length > 0)


def two_job_offsets(result: ModelResult, share: float, period_s: float) -> np.ndarray:
    """Offset between two jobs' communication starts per iteration, as a fraction of the
    communication phase ``share * period_s`` (the x of the convergence map), in [0, 1]."""
    diff = result.comm_starts_s[:, 1, :] - result.comm_starts_s[:, 0, :]
    return np.clip(np.abs(diff) / (share * period_s), 0, 1)
