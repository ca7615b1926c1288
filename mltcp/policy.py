"""The MLTCP window-scaling rule: one source of truth for the parameters and for the
function the kernel programs compute (``ebpf/mltcp_rule.h``, held to this module bit for
bit by a test).

``ratio = bytes acked this iteration / bytes per iteration`` (clamped to [0, 1]) and
``F = slope * ratio + intercept``.  A flow further through its iteration grows its window
faster, so the job that got ahead finishes first and the jobs drift into an interleaved
schedule.  Fixed point: Q10 (1024 = 1.0), every division truncating, as in the C header.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

SHIFT = 10
ONE = 1 << SHIFT
U32_MAX = 0xFFFFFFFF
MODES = ("idle", "exact")
FLAG_SCALE_CUT = 0x1  # MLTCP_FLAG_SCALE_CUT in ebpf/mltcp_maps.h


# what one step of each parameter is as the kernel stores it (MltcpParams.fixed): slope and
# intercept in Q10, the idle gap in whole microseconds
SCALE = {"slope": ONE, "intercept": ONE, "idle_ms": 1000}
RESOLUTION_TEXT = {"slope": "1/1024", "intercept": "1/1024", "idle_ms": "0.001 ms (1 µs)"}


def stored_as_zero(name: str, value: float) -> bool:
    """Would the kernel store a positive ``value`` of parameter ``name`` (slope, intercept,
    idle_ms) as 0, it being under half a step (:data:`SCALE`), rounded as :meth:`fixed`
    rounds?"""
    return math.isfinite(value) and value > 0 and int(round(value * SCALE[name])) == 0


@dataclass(frozen=True)
class MltcpParams:
    """MLTCP parameters; the defaults are the one table every part reads (the loader,
    ``mltcp set``, the testbed, the simulator).

    slope, intercept : F = slope * ratio + intercept (dimensionless; intercept > 0).
        Default 2 and 1: F runs from 1 to 3 over an iteration, so a flow never grows its
        window more slowly than its base congestion control (with intercept 0.5 it did,
        through the first half of every iteration, also alone on the link), and
        k = slope / intercept = 2 as before.  Measured on real-model pairs in
        docs/mltcp_defaults.md.
    idle_ms : an idle gap of at least this (milliseconds) between a flow's last ACK and
        its next transmission can start a new iteration (``idle`` mode), once the flow
        has moved three quarters of its last iteration's bytes (:func:`ends_iteration`).
    mode : ``idle`` (gap detection) or ``exact`` (the training process marks iteration
        ends with :func:`mltcp.mark_iteration`).
    scale_cut : ``mltcp_dctcp`` only: divide DCTCP's window cut on congestion
        (``cwnd * alpha / 2`` segments) by F as well, so a flow further through its
        iteration backs off less.  An extension beyond the MLTCP paper's rule, which
        scales the increase only.  On by default: with F >= 1 the cut is never larger
        than DCTCP's (a flow is never less aggressive than DCTCP), shares on a full link
        go as F**2 (9 : 1 from the end of an iteration to its start), and on the three
        real-model pairs MLTCP was within 1 % of DCTCP's same start in all 15 runs and
        <= 1.10x ideal in 5 of the 6 where the same start was >= 1.15x (one 1.106x;
        without it 3 of 15 runs were 2-3 % slower and 2 of 7 met 1.10x;
        docs/mltcp_defaults.md).  The fluid model and the simulator weight shares by F,
        or F**2 with it.
    """

    slope: float = 2.0
    intercept: float = 1.0
    idle_ms: float = 10.0
    mode: str = "idle"
    scale_cut: bool = True

    def __post_init__(self) -> None:
        for name in ("slope", "intercept", "idle_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if self.slope < 0:
            raise ValueError(f"slope must be >= 0, got {self.slope}")
        if self.intercept <= 0:
            raise ValueError(f"intercept must be > 0, got {self.intercept}")
        if self.slope + self.intercept > 64:
            raise ValueError(f"slope + intercept must be <= 64, got {self.slope + self.intercept}")
        if self.idle_ms <= 0 or self.idle_ms > 60_000:
            raise ValueError(f"idle_ms must be in (0, 60000], got {self.idle_ms}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not isinstance(self.scale_cut, bool):
            raise ValueError(f"scale_cut must be true or false, got {self.scale_cut!r}")

    @property
    def k(self) -> float:
        """slope / intercept: the strength of the convergence map."""
        return self.slope / self.intercept

    def fixed(self) -> tuple[int, int, int, int, int]:
        """(slope_q, intercept_q, idle_us, mode, flags) as the kernel stores them; slope
        and intercept round to the nearest 1/1024 (intercept at least 1/1024)."""
        return (
            int(round(self.slope * ONE)),
            max(1, int(round(self.intercept * ONE))),
            int(round(self.idle_ms * 1000)),
            MODES.index(self.mode),
            FLAG_SCALE_CUT if self.scale_cut else 0,
        )


@dataclass(frozen=True)
class MltcpOptions:
    """How one run asks for MLTCP (a testbed scheme's ``mode``, ``slope``, ``intercept``,
    ``scale_cut``): the iteration mode, and the parts of the rule it sets over the
    parameters the kernel has loaded (None: keep the loaded value).  Units and meaning as
    in :class:`MltcpParams`: ``slope`` and ``intercept`` dimensionless (F = slope * ratio +
    intercept), ``scale_cut`` a flag for ``mltcp_dctcp``."""

    mode: Literal["idle", "exact"] = "idle"
    slope: float | None = None
    intercept: float | None = None
    scale_cut: bool | None = None

    RULE: ClassVar[tuple[str, ...]] = ("slope", "intercept", "scale_cut")
    FIELDS: ClassVar[tuple[str, ...]] = ("mode", *RULE)  # every field, as a config names it

    def rule(self) -> dict[str, Any]:
        """The rule's fields this run sets, by name (those not None)."""
        return {k: getattr(self, k) for k in self.RULE if getattr(self, k) is not None}

    def over(self, loaded: MltcpParams) -> MltcpParams:
        """``loaded`` with this run's mode and the rule's fields it sets; ValueError (naming
        the field) where the result is not a valid rule."""
        return replace(loaded, mode=self.mode, **self.rule())


def factor(ratio: float, params: MltcpParams) -> float:
    """F(ratio) in real numbers; ratio is clamped to [0, 1]."""
    r = min(1.0, max(0.0, ratio))
    return params.slope * r + params.intercept


# -- the fixed-point rule, line for line as in ebpf/mltcp_rule.h -------------------------


def ratio_q(sent: int, per_iter: int) -> int:
    if per_iter == 0:
        return 0
    if sent >= per_iter:
        return ONE
    return (sent << SHIFT) // per_iter


def ends_iteration(elapsed_us: int, idle_us: int, since: int, per_iter: int) -> bool:
    """Idle mode: a transmission after ``elapsed_us`` of silence ends the iteration when
    the silence is at least ``idle_us`` and the bytes acked since the iteration began
    (``since``) are at least ceil(3/4 of the last iteration's, ``per_iter``); any amount
    while there is no estimate (``per_iter`` 0)."""
    if elapsed_us < idle_us:
        return False
    if per_iter == 0:
        return True
    return since >= per_iter - (per_iter >> 2)


def counted_iterations(bursts: Sequence[tuple[int, int]], idle_us: int) -> list[int]:
    """What idle mode counts on one flow (``ebpf/mltcp_common.h``: ``mltcp_tx_start`` and
    ``mltcp_new_iteration``): ``bursts`` are (silence before it in microseconds, bytes)
    in the order sent; returns the bytes of each iteration the kernel counts."""
    counted: list[int] = []
    per_iter = since = 0
    for silence_us, size in bursts:
        if ends_iteration(silence_us, idle_us, since, per_iter) and since > 0:
            per_iter = since
            counted.append(since)
            since = 0
        since += size
    return counted


def factor_q(ratio: int, slope_q: int, intercept_q: int) -> int:
    return (intercept_q + ((slope_q * ratio) >> SHIFT)) & U32_MAX


def ai_window(cwnd: int, f_q: int) -> int:
    if f_q == 0:
        return cwnd if cwnd else 1
    w = min((cwnd << SHIFT) // f_q, U32_MAX)
    return w if w else 1


def scale_cut(cut: int, f_q: int, cwnd: int) -> int:
    """DCTCP with ``scale_cut``: the window cut (segments) divided by F, at most ``cwnd``."""
    if f_q == 0:
        return min(cut, cwnd)
    return min((cut << SHIFT) // f_q, cwnd)


def scale_acked(acked: int, f_q: int, rem_q: int) -> tuple[int, int]:
    """CUBIC variant: ACKed segments times F (Q10) with the sub-segment remainder carried.
    Returns (segments to feed CUBIC, new remainder in Q10)."""
    total = acked * f_q + (rem_q & (ONE - 1))
    return min(total >> SHIFT, U32_MAX), total & (ONE - 1)


# -- convergence ---------------------------------------------------------------------------


def convergence_map(x: float, k: float) -> float:
    """MLTCP's map for two identical jobs: the offset ``x`` (fraction of a communication
    phase, in [0, 1]) after one more iteration, ``x + k x (1 - x) / (1 + k x)``."""
    return x + k * x * (1 - x) / (1 + k * x)


def iterations_to_interleave(x0: float, k: float, tol: float = 0.05, limit: int = 10_000) -> int:
    """Iterations until the offset is within ``tol`` of full interleaving (x = 1); the
    ``limit`` when it never gets there (x0 = 0 or k = 0)."""
    x = x0
    for n in range(limit):
        if x >= 1 - tol:
            return n
        x = convergence_map(x, k)
    return limit
