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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Literal

SHIFT = 10
ONE = 1 << SHIFT
U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
MODES = ("idle", "exact")
FLAG_SCALE_CUT = 0x1  # MLTCP_FLAG_SCALE_CUT in ebpf/mltcp_maps.h


# what one step of each parameter is as the kernel stores it (MltcpParams.fixed): slope and
# intercept in Q10, the idle gap in whole microseconds
SCALE = {"slope": ONE, "intercept": ONE, "idle_ms": 1000}
RESOLUTION_TEXT = {"slope": "1/1024", "intercept": "1/1024", "idle_ms": "0.001 ms (1 µs)"}
#: what :meth:`MltcpParams.fixed` stores for a positive value under half a step
STORED_UNDER_A_STEP = {
    "slope": "0",
    "intercept": "1/1024, the kernel's smallest",
    "idle_ms": "0",
}
RULE_MAX = 64  # slope + intercept at most this: F <= 64, 1 << 16 in Q10 (ebpf/mltcp_maps.h)


def steps(name: str, value: float) -> int:
    """What the kernel stores for parameter ``name`` (slope, intercept, idle_ms) at
    ``value``: whole steps of :data:`SCALE`, to the nearest, the intercept at least one."""
    q = int(round(value * SCALE[name]))
    return max(1, q) if name == "intercept" else q


def resolution_problem(name: str, value: float) -> str | None:
    """Why the kernel cannot hold a positive ``value`` of parameter ``name`` (slope,
    intercept, idle_ms): under half a step, :meth:`MltcpParams.fixed` would store it as 0
    (slope, idle_ms) or as the smallest intercept; None when it can (0 is itself)."""
    if not (math.isfinite(value) and value > 0) or int(round(value * SCALE[name])) != 0:
        return None
    return (
        f"{name} {value} is under the kernel's resolution, {RESOLUTION_TEXT[name]}: it "
        f"would be stored as {STORED_UNDER_A_STEP[name]}"
    )


def _check_number(name: str, value: Any) -> None:
    """ValueError naming ``name`` (slope, intercept, idle_ms) where ``value`` is not a
    valid value of it on its own: not a finite number, or out of range."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if name == "slope" and value < 0:
        raise ValueError(f"slope must be >= 0, got {value}")
    if name == "intercept" and value <= 0:
        raise ValueError(f"intercept must be > 0, got {value}")
    if name == "idle_ms" and not 0 < value <= 60_000:
        raise ValueError(f"idle_ms must be in (0, 60000], got {value}")


def check_fields(given: Mapping[str, Any]) -> None:
    """MLTCP's parameters' validation, for any subset of :class:`MltcpParams`' fields by
    name: ValueError naming the first that is not valid on its own, or slope + intercept
    when both are there.  :class:`MltcpParams` runs it on every field at construction;
    ``mltcp load``/``set`` run it on the flags given before reading the loaded ones.  (What
    the kernel can hold: :meth:`MltcpParams.check_stored`.)"""
    for name in ("slope", "intercept", "idle_ms"):
        if name in given:
            _check_number(name, given[name])
    if "slope" in given and "intercept" in given:
        slope, intercept = given["slope"], given["intercept"]
        if slope + intercept > RULE_MAX:
            raise ValueError(
                f"slope + intercept must be <= {RULE_MAX}, got {slope:g} + {intercept:g} = "
                f"{slope + intercept:g}"
            )
    if "mode" in given and given["mode"] not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {given['mode']!r}")
    if "scale_cut" in given and not isinstance(given["scale_cut"], bool):
        raise ValueError(f"scale_cut must be true or false, got {given['scale_cut']!r}")


@dataclass(frozen=True)
class MltcpParams:
    """MLTCP parameters; the defaults are the one table every part reads (the loader,
    ``mltcp set``, the testbed, the simulator).  Construction validates (:func:`check_fields`,
    ValueError naming the field); :meth:`check_stored` refuses, for the kernel, a positive
    value under half its step (1/1024 for slope and intercept, 1 µs for idle_ms), as every
    way there does (``mltcp load``/``set``, :func:`mltcp.admin.set_params` and ``load``,
    a testbed scheme through :meth:`MltcpOptions.over`).

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
        check_fields({f.name: getattr(self, f.name) for f in fields(self)})

    @property
    def k(self) -> float:
        """slope / intercept: the strength of the convergence map."""
        return self.slope / self.intercept

    def check_stored(self) -> None:
        """ValueError naming the field (:func:`resolution_problem`) where the kernel would
        not hold this rule: a positive slope or idle gap :meth:`fixed` stores as 0, or an
        intercept it raises to 1/1024.  Construction allows such a rule (the simulator
        models it as :meth:`fixed` stores it); every way to the kernel calls this first."""
        for name in ("slope", "intercept", "idle_ms"):
            if problem := resolution_problem(name, getattr(self, name)):
                raise ValueError(problem)

    def fixed(self) -> tuple[int, int, int, int, int]:
        """(slope_q, intercept_q, idle_us, mode, flags) as the kernel stores them; slope
        and intercept round to the nearest 1/1024 (intercept at least 1/1024), the idle
        gap to the nearest µs (:func:`steps`)."""
        return (
            steps("slope", self.slope),
            steps("intercept", self.intercept),
            steps("idle_ms", self.idle_ms),
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
        the field) where the result is not a valid rule, or one the kernel would not hold
        (:meth:`MltcpParams.check_stored`)."""
        params = replace(loaded, mode=self.mode, **self.rule())
        params.check_stored()
        return params


def factor(ratio: float, params: MltcpParams) -> float:
    """F(ratio) in real numbers; ratio is clamped to [0, 1]."""
    r = min(1.0, max(0.0, ratio))
    return params.slope * r + params.intercept


# -- the fixed-point rule, line for line as in ebpf/mltcp_rule.h -------------------------


def ratio_q(sent: int, per_iter: int) -> int:
    """floor(sent * 1024 / per_iter) for u64 ``sent`` and ``per_iter``: ``sent << 10``
    while it fits 64 bits, else a long division of one bit a step (the C has no wider
    integer), the remainder kept below ``per_iter``."""
    if per_iter == 0:
        return 0
    if sent >= per_iter:
        return ONE
    if sent <= U64_MAX >> SHIFT:
        return (sent << SHIFT) // per_iter
    q = 0
    for _ in range(SHIFT):  # sent < per_iter throughout
        q <<= 1
        if sent >= per_iter - sent:
            sent -= per_iter - sent
            q |= 1
        else:
            sent += sent
    return q


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
