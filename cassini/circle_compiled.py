"""The searches of :mod:`cassini.circle` compiled with numba: the coordinate descent (with
its greedy start) and the excess per rotation that the centring and the exact search sum.
The same floating-point operations in the same order as their numpy versions, including
numpy's pairwise summation of each excess row, so every value and every ``argmin`` is the
same to the last bit (tested against the numpy versions).  About 10x faster on the link
problems of a simulated cluster, where each step is a (rotations x angles) array too
small for numpy's per-call cost.  Pure logic: no I/O.

Circles of :data:`MIN_ANGLES` to :data:`MAX_ANGLES` angles only (5 degrees = 72; numpy
sums up to 128 values in one block of 8 partial sums); :func:`supports` says which.
Without numba (the ``[sim]`` extra) :data:`AVAILABLE` is False and :mod:`cassini.circle`
keeps its numpy versions.  The kernels compile on first use (a few seconds, once per
clone: numba caches them beside this file).
"""

from __future__ import annotations

import math

import numpy as np

from cassini import kernel_cache

try:  # numba is in the [sim] extra
    from numba import njit
except ImportError:  # pragma: no cover - exercised where numba is absent
    njit = None

AVAILABLE = njit is not None
#: circles these kernels sum as numpy does: one block of numpy's pairwise summation
MIN_ANGLES, MAX_ANGLES = 8, 128


def supports(angles: int) -> bool:
    """Whether the kernels handle a circle of ``angles`` angles."""
    return MIN_ANGLES <= angles <= MAX_ANGLES


def _identity(f):
    return f


if AVAILABLE:  # drop cached code another changed source made stale
    kernel_cache.ensure_fresh()
_jit = njit(cache=True, nogil=True) if AVAILABLE else _identity


@_jit
def _excess_sums(base, doubled, count, capacity, lanes, out):  # pragma: no cover - compiled
    """``out[r] = excess(base + roll(vector, r), capacity).sum()`` for ``r < count``, as
    numpy sums each row of 8 to 128 values: 8 partial sums over whole groups of 8
    (``lanes[:, r]``), added as ``((0+1)+(2+3))+((4+5)+(6+7))``, then the rest one by
    one, then added to 0.0.  The rotations run side by side (the same additions in the
    same order per rotation, so the same bits), which the compiler vectorises.
    ``doubled`` is ``vector`` twice: ``roll(vector, r)[a]`` is ``doubled[a - r + n]``."""
    n = base.shape[0]
    whole = n - (n % 8)
    for lane in range(8):
        b = base[lane]
        for r in range(count):
            x = (b + doubled[lane - r + n]) - capacity
            lanes[lane, r] = x if x > 0.0 else 0.0
    for i in range(8, whole, 8):
        for lane in range(8):
            a = i + lane
            b = base[a]
            for r in range(count):
                x = (b + doubled[a - r + n]) - capacity
                lanes[lane, r] += x if x > 0.0 else 0.0
    for r in range(count):
        out[r] = ((lanes[0, r] + lanes[1, r]) + (lanes[2, r] + lanes[3, r])) + (
            (lanes[4, r] + lanes[5, r]) + (lanes[6, r] + lanes[7, r])
        )
    for a in range(whole, n):
        b = base[a]
        for r in range(count):
            x = (b + doubled[a - r + n]) - capacity
            out[r] += x if x > 0.0 else 0.0
    for r in range(count):
        out[r] = 0.0 + out[r]


@_jit
def excess_rows(base, vector, count, capacity):  # pragma: no cover - compiled
    """``excess(base + roll(vector, r), capacity).sum()`` for ``r < count`` (bits/s), as
    numpy computes each: one array of ``count`` values."""
    n = base.shape[0]
    doubled = np.empty(2 * n)
    for a in range(n):
        doubled[a] = vector[a]
        doubled[a + n] = vector[a]
    out = np.empty(count)
    _excess_sums(base, doubled, count, capacity, np.empty((8, count)), out)
    return out


@_jit
def descend(vectors, periods, capacity, order, random_starts):  # pragma: no cover - compiled
    """:func:`cassini.circle._coordinate_descent` on ``vectors`` (jobs x angles, bits/s):
    a greedy start (job 0 at 0, then each job of ``order`` at its first best rotation
    against the jobs placed before it) and the rows of ``random_starts``; from each, move
    one job at a time to its best rotation until no move lowers the total excess by more
    than ``1e-9 * capacity`` (at most 100 sweeps); the first start ending lowest wins.
    Skipped, as they would change nothing (same bits): a job that stayed put, until some
    job moves; any move once the excess is within the tolerance of 0 (never negative)."""
    n, angles = vectors.shape
    width = max(1, int(periods.max()))
    doubled = np.empty((n, 2 * angles))
    for i in range(n):
        for a in range(angles):
            doubled[i, a] = vectors[i, a]
            doubled[i, a + angles] = vectors[i, a]
    zero = np.zeros(2 * angles)  # the total's own excess: total + 0.0 is total
    lanes = np.empty((8, width))
    values = np.empty(width)
    total = np.empty(angles)
    rest = np.empty(angles)
    starts = np.zeros((random_starts.shape[0] + 1, n), np.int64)
    for a in range(angles):  # the greedy start
        total[a] = vectors[0, a]
    for i in order:
        _excess_sums(total, doubled[i], periods[i], capacity, lanes, values)
        k = 0
        for r in range(periods[i]):
            if values[r] < values[k]:
                k = r
        starts[0, i] = k
        for a in range(angles):
            total[a] = total[a] + doubled[i, a - k + angles]
    for s in range(random_starts.shape[0]):
        for i in range(n):
            starts[s + 1, i] = random_starts[s, i]
    stayed_at = np.empty(n, np.int64)
    best_value = math.inf
    best_rot = starts[0].copy()
    for s in range(starts.shape[0]):
        if best_value == 0.0:  # no later start can end strictly lower
            break
        rot = starts[s].copy()
        moves = 0
        stayed_at[:] = -1
        for a in range(angles):
            total[a] = 0.0
        for i in range(n):  # rotated_sum: row by row
            for a in range(angles):
                total[a] += doubled[i, a - rot[i] + angles]
        _excess_sums(total, zero, 1, capacity, lanes, values)
        current = values[0]
        for _ in range(100):
            if current <= 1e-9 * capacity:  # no move can lower it by the tolerance
                break
            improved = False
            for i in range(1, n):
                if stayed_at[i] == moves:
                    continue
                for a in range(angles):
                    rest[a] = total[a] - doubled[i, a - rot[i] + angles]
                _excess_sums(rest, doubled[i], periods[i], capacity, lanes, values)
                k = 0
                for r in range(periods[i]):
                    if values[r] < values[k]:
                        k = r
                if values[k] < current - 1e-9 * capacity:
                    rot[i] = k
                    current = values[k]
                    for a in range(angles):
                        total[a] = rest[a] + doubled[i, a - k + angles]
                    improved = True
                    moves += 1
                else:
                    stayed_at[i] = moves
            if not improved:
                break
        if current < best_value:
            best_value = current
            best_rot = rot
    return best_rot
