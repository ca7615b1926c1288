"""The coordinate descent of :func:`cassini.circle._coordinate_descent` compiled with
numba: the same floating-point operations in the same order as its numpy version,
including numpy's pairwise summation of each excess row, so the rotations it returns are
the same to the last bit (tested against the numpy version).  ~10x faster on the link
problems of a simulated cluster, where each descent step is a (rotations x angles) array
too small for numpy's per-call cost.  Pure logic: no I/O.  Without numba (the ``[sim]``
extra) :data:`AVAILABLE` is False and :mod:`cassini.circle` keeps its numpy version.
"""

from __future__ import annotations

import math

import numpy as np

try:  # numba is in the [sim] extra
    from numba import njit
except ImportError:  # pragma: no cover - exercised where numba is absent
    njit = None

AVAILABLE = njit is not None

#: numpy's pairwise summation: blocks up to this many values are summed in 8 lanes
_PW_BLOCK = 128


def _identity(f):
    return f


_jit = njit(cache=True, nogil=True) if AVAILABLE else _identity


@_jit
def _block_sum(a, lo, n):  # pragma: no cover - compiled
    """numpy's pairwise sum of ``a[lo:lo + n]`` for ``n`` up to 128: under 8 values one
    by one, else in 8 interleaved partial sums and the rest one by one."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    whole = n - (n % 8)
    while i < whole:
        j = lo + i
        r0 += a[j]
        r1 += a[j + 1]
        r2 += a[j + 2]
        r3 += a[j + 3]
        r4 += a[j + 4]
        r5 += a[j + 5]
        r6 += a[j + 6]
        r7 += a[j + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@_jit
def _pairwise_sum(a, lo, n):  # pragma: no cover - compiled
    """numpy's pairwise sum of ``a[lo:lo + n]`` (``DOUBLE_pairwise_sum``): blocks of up
    to 128 by :func:`_block_sum`, longer runs split in halves (the first a multiple of 8)
    and the halves' sums added.  The recursion is unrolled on explicit stacks: numba's
    cache loads a self-recursive function badly (a segfault)."""
    if n <= _PW_BLOCK:
        return _block_sum(a, lo, n)
    depth = 64
    los = np.empty(depth, np.int64)
    ns = np.empty(depth, np.int64)
    states = np.empty(depth, np.int64)
    sums = np.empty(depth)
    top, n_sums = 0, 0
    los[0], ns[0], states[0] = lo, n, 0
    while top >= 0:
        here, m = los[top], ns[top]
        if m <= _PW_BLOCK:
            sums[n_sums] = _block_sum(a, here, m)
            n_sums += 1
            top -= 1
            continue
        half = m // 2
        half -= half % 8
        if states[top] == 0:  # the first half
            states[top] = 1
            top += 1
            los[top], ns[top], states[top] = here, half, 0
        elif states[top] == 1:  # the second half
            states[top] = 2
            top += 1
            los[top], ns[top], states[top] = here + half, m - half, 0
        else:  # both done: their sum
            n_sums -= 1
            sums[n_sums - 1] = sums[n_sums - 1] + sums[n_sums]
            top -= 1
    return sums[0]


@_jit
def _excess_sum(base, vector, k, capacity, scratch):  # pragma: no cover - compiled
    """``excess(base + roll(vector, k), capacity).sum()`` as numpy computes it (bits/s):
    the rolled vector read in its two contiguous runs."""
    n = base.shape[0]
    for a in range(k):
        x = (base[a] + vector[a - k + n]) - capacity
        scratch[a] = x if x > 0.0 else 0.0
    for a in range(k, n):
        x = (base[a] + vector[a - k]) - capacity
        scratch[a] = x if x > 0.0 else 0.0
    return 0.0 + _pairwise_sum(scratch, 0, n)


@_jit
def _excess_sums(
    base, vector, doubled, count, capacity, lanes, scratch, out
):  # pragma: no cover - compiled
    """``out[r] = excess(base + roll(vector, r), capacity).sum()`` for ``r < count``, as
    numpy computes each (bits/s).  Up to 128 angles the rotations run side by side: each
    keeps numpy's 8 partial sums in ``lanes[:, r]`` (the same additions in the same
    order per rotation, so the same bits), which the compiler vectorises across
    rotations; ``doubled`` is ``vector`` twice, so that ``roll(vector, r)[a]`` is
    ``doubled[a - r + n]``."""
    n = base.shape[0]
    if n < 8 or n > _PW_BLOCK:
        for r in range(count):
            out[r] = _excess_sum(base, vector, r, capacity, scratch)
        return
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
    doubled[:n] = vector
    doubled[n:] = vector
    out = np.empty(count)
    _excess_sums(base, vector, doubled, count, capacity, np.empty((8, count)), np.empty(n), out)
    return out


@_jit
def greedy_start(vectors, periods, capacity, order):  # pragma: no cover - compiled
    """Job 0 at rotation 0, then each job of ``order`` at its first best rotation (of
    ``periods[i]``) against the jobs placed before it: the rotations per job."""
    n, angles = vectors.shape
    rot = np.zeros(n, np.int64)
    placed = vectors[0].copy()
    scratch = np.empty(angles)
    values = np.empty(max(1, int(periods.max())))
    doubled = np.empty(2 * angles)
    lanes = np.empty((8, values.shape[0]))
    for i in order:
        doubled[:angles] = vectors[i]
        doubled[angles:] = vectors[i]
        _excess_sums(placed, vectors[i], doubled, periods[i], capacity, lanes, scratch, values)
        k = 0
        for r in range(periods[i]):
            if values[r] < values[k]:
                k = r
        rot[i] = k
        for a in range(angles):
            src = a - k
            if src < 0:
                src += angles
            placed[a] = placed[a] + vectors[i, src]
    return rot


@_jit
def descend_starts(vectors, periods, capacity, starts):  # pragma: no cover - compiled
    """From each row of ``starts`` (rotations per job, job 0 at 0), move one job at a
    time to its best rotation against the others (of ``periods[i]``) until no move lowers
    the total excess by more than ``1e-9 * capacity``, at most 100 sweeps; returns the
    index of the first start whose descent ends lowest and the rotations it ends at.
    ``vectors`` (jobs x angles) are the jobs' demands (bits/s) at rotation 0."""
    n, angles = vectors.shape
    total = np.empty(angles)
    rest = np.empty(angles)
    scratch = np.empty(angles)
    values = np.empty(max(1, int(periods.max())))
    best_value, best_index = math.inf, 0
    best_rot = starts[0].copy()
    # moves so far, and per job the count at its last evaluation that kept it in place:
    # while no job moves, such a job would compute the same values (bit for bit) and
    # stay again, so it is not evaluated
    stayed_at = np.empty(n, np.int64)
    doubled = np.empty((n, 2 * angles))
    doubled[:, :angles] = vectors
    doubled[:, angles:] = vectors
    lanes = np.empty((8, values.shape[0]))
    for s in range(starts.shape[0]):
        rot = starts[s].copy()
        moves = 0
        stayed_at[:] = -1
        for a in range(angles):
            total[a] = 0.0
        for i in range(n):  # rotated_sum: row by row
            k = rot[i] % angles
            for a in range(angles):
                src = a - k
                if src < 0:
                    src += angles
                total[a] += vectors[i, src]
        for a in range(angles):
            x = total[a] - capacity
            scratch[a] = x if x > 0.0 else 0.0
        current = 0.0 + _pairwise_sum(scratch, 0, angles)
        for _ in range(100):
            improved = False
            for i in range(1, n):
                if stayed_at[i] == moves:
                    continue
                own = rot[i]
                for a in range(angles):
                    src = a - own
                    if src < 0:
                        src += angles
                    rest[a] = total[a] - vectors[i, src]
                count = periods[i]
                _excess_sums(rest, vectors[i], doubled[i], count, capacity, lanes, scratch, values)
                k = 0
                for r in range(count):
                    if values[r] < values[k]:
                        k = r
                if values[k] < current - 1e-9 * capacity:
                    rot[i] = k
                    current = values[k]
                    for a in range(angles):
                        src = a - k
                        if src < 0:
                            src += angles
                        total[a] = rest[a] + vectors[i, src]
                    improved = True
                    moves += 1
                else:
                    stayed_at[i] = moves
            if not improved:
                break
        if current < best_value:
            best_value, best_index = current, s
            best_rot = rot
    return best_index, best_rot
