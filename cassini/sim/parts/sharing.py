"""Link sharing: how flows that want more than a link's capacity split it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from cassini.errors import InputError
from cassini.sim.workload import JobSpec
from mltcp.policy import ONE, MltcpParams, factor_q, ratio_q

_EPS = 1e-12


def mltcp_factor(sent_bits: float, bits_per_iteration: float, params: MltcpParams) -> float:
    """MLTCP's F for a flow that has sent ``sent_bits`` of its iteration's
    ``bits_per_iteration`` (bits), computed by :mod:`mltcp.policy`'s fixed-point rule on
    bytes, exactly as the kernel programs compute it."""
    slope_q, intercept_q = params.fixed()[:2]
    ratio = ratio_q(int(sent_bits // 8), int(bits_per_iteration // 8))
    return factor_q(ratio, slope_q, intercept_q) / ONE


def mltcp_weight(sent_bits: float, bits_per_iteration: float, params: MltcpParams) -> float:
    """A flow's share weight under MLTCP on DCTCP-like rate control: F, or F**2 with
    ``scale_cut`` (see the module docstring)."""
    f = mltcp_factor(sent_bits, bits_per_iteration, params)
    return f * f if params.scale_cut else f


@lru_cache(maxsize=64)
def progress_table(
    mltcp: MltcpParams | None, progress: Callable[[float], float] | None = None
) -> np.ndarray | None:
    """A flow's weight factor at each progress point ``k / ONE`` (k = 0..ONE, MLTCP's
    fixed-point ratio of the iteration's bytes sent): MLTCP's weight
    (:func:`mltcp_weight`) with ``mltcp``, times ``progress(k / ONE)``; None when
    neither is given.  The kernels read a flow's weight off this table at its exact
    fixed-point ratio, so MLTCP's entries are its rule's own numbers.  Kept per
    (``mltcp``, ``progress``): callers must not write to it."""
    if mltcp is None and progress is None:
        return None
    table = np.ones(ONE + 1)
    if mltcp is not None:
        slope_q, intercept_q = mltcp.fixed()[:2]
        f = np.array([factor_q(r, slope_q, intercept_q) / ONE for r in range(ONE + 1)])
        table = f * f if mltcp.scale_cut else f
    if progress is not None:
        factors = np.array([progress(r / ONE) for r in range(ONE + 1)], float)
        bad = np.flatnonzero(~((factors > 0) & np.isfinite(factors)))
        if len(bad):
            name = getattr(progress, "__name__", repr(progress))
            raise InputError(
                "progress",
                f"{name} gave weight {factors[bad[0]]} at progress {bad[0] / ONE} "
                "(weights must be finite numbers > 0)",
            )
        table = table * factors
    return table


def shared_rates(
    demand_bps: Sequence[float],
    links_of: Sequence[Sequence[int]],
    capacity_bps: Sequence[float],
    weights: Sequence[float] | None = None,
    classes: Sequence[int] | None = None,
) -> list[float]:
    """Rates (bits/s) of flows capped at their demand: strict priority by ``classes``
    (0 first), weighted max-min fair within a class (rate proportional to ``weights``
    until a flow hits its demand or a link fills).

    Parameters
    ----------
    demand_bps : each flow's cap.
    links_of : for each flow, the indices of the links it crosses.
    capacity_bps : each link's capacity.
    weights : each flow's weight (> 0); default all 1 (max-min fair).
    classes : each flow's priority class; default all 0.

    Example
    -------
    >>> shared_rates([10, 10], [[0], [0]], [12], weights=[1, 2])
    [4.0, 8.0]
    >>> shared_rates([10, 10], [[0], [0]], [12], classes=[0, 1])
    [10.0, 2.0]
    """
    n = len(demand_bps)
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    cls = [0] * n if classes is None else list(classes)
    remaining = [float(c) for c in capacity_bps]
    rate = [0.0] * n
    for level in sorted(set(cls)):
        members = [f for f in range(n) if cls[f] == level]
        _fill(members, demand_bps, links_of, remaining, w, rate)
    return rate


def _fill(
    members: list[int],
    demand: Sequence[float],
    links_of: Sequence[Sequence[int]],
    remaining: list[float],
    w: list[float],
    rate: list[float],
) -> None:
    """Weighted progressive filling of ``members`` on ``remaining`` (updated in place)."""
    load: dict[int, float] = {}
    for f in members:
        for link in links_of[f]:
            load[link] = load.get(link, 0.0) + w[f]
    open_ = set(members)
    while open_:
        bound = {}
        for f in open_:
            b = demand[f] / w[f]
            for link in links_of[f]:
                level = remaining[link] / load[link]
                if level < b:
                    b = level
            bound[f] = b
        low = min(bound.values())
        for f, b in bound.items():
            if b <= low * (1 + 1e-9) + _EPS:
                rate[f] = low * w[f]
                open_.discard(f)
                for link in links_of[f]:
                    remaining[link] = max(0.0, remaining[link] - rate[f])
                    load[link] -= w[f]


@dataclass(frozen=True)
class Sharing:
    """A sharing part: whether flows are weighted by MLTCP's F (its parameters are the
    run's), whether links serve priority classes strictly, ``weight``, a job's share
    weight (> 0) in weighted max-min sharing as a function of its spec, and
    ``progress``, a flow's weight factor (> 0) as a function of the fraction of its
    iteration's bytes it has sent, and ``level``, a job's strict priority class (an int
    >= 0, 0 served first) as a function of its spec (all off: max-min fair).

    A scheduler's combined sharing (:meth:`combine`) also names ``weighted``,
    ``progressing`` and ``ordering``: the table entries whose weights it multiplies into
    each job's :meth:`share` and each flow's :meth:`progress_weight`, and the one entry
    that gives each job its class (:meth:`level_of`)."""

    mltcp: bool = False
    priority: bool = False
    weight: Callable[[JobSpec], float] | None = None
    progress: Callable[[float], float] | None = None
    level: Callable[[JobSpec], int] | None = None
    weighted: tuple[str, ...] = ()
    progressing: tuple[str, ...] = ()
    ordering: tuple[str, ...] = ()

    @classmethod
    def combine(cls, names: set[str] | frozenset[str]) -> Sharing:
        """The sharing of the :data:`SHARINGS` entries ``names``: flags or-ed, weights
        multiplied (in name order); InputError when more than one orders jobs strictly
        (``priority`` or a ``level`` function)."""
        strict = sorted(e for e in names if SHARINGS[e].priority or SHARINGS[e].level)
        if len(strict) > 1:
            raise InputError(
                "schedulers",
                f"sharing parts {', '.join(strict)} each order jobs strictly; give at most one",
            )
        return cls(
            mltcp=any(SHARINGS[e].mltcp for e in names),
            priority=any(SHARINGS[e].priority for e in names),
            weighted=tuple(sorted(e for e in names if SHARINGS[e].weight is not None)),
            progressing=tuple(sorted(e for e in names if SHARINGS[e].progress is not None)),
            ordering=tuple(sorted(e for e in names if SHARINGS[e].level is not None)),
        )

    def _rules(self, field: str, names: tuple[str, ...]) -> list[tuple[str, Callable]]:
        """(name, function) of the entries ``names``' ``field`` (``weight``, ``progress``
        or ``level``), then this entry's own under the field's name."""
        rules = [(name, getattr(SHARINGS[name], field)) for name in names]
        own = getattr(self, field)
        return rules + [(field, own)] if own is not None else rules

    @property
    def strict(self) -> bool:
        """Whether links serve jobs' classes strictly (Crux's ``priority`` or a
        ``level`` entry)."""
        return self.priority or bool(self.ordering) or self.level is not None

    def level_of(self, spec: JobSpec) -> int:
        """Job ``spec``'s class under the ``level`` entry (0 without one; Crux's levels
        are the engine's).  InputError naming the rule when it is not an int >= 0."""
        for name, rule in self._rules("level", self.ordering):
            v = rule(spec)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
                raise InputError(
                    "schedulers",
                    f"sharing rule {name!r} gave job {spec.job_id!r} level {v!r} "
                    "(levels are ints >= 0, 0 served first)",
                )
            return int(v)
        return 0

    @property
    def functions(self) -> tuple[str, ...]:
        """The entries given by their functions (``weighted``, ``progressing`` and
        ``ordering``), in name order."""
        return tuple(sorted({*self.weighted, *self.progressing, *self.ordering}))

    @property
    def dynamic(self) -> bool:
        """Whether a flow's weight changes as its iteration's bytes go out (MLTCP or a
        progress entry): the models then let the sharing re-converge and re-solve as
        weights move."""
        return self.mltcp or bool(self.progressing) or self.progress is not None

    def progress_weight(self) -> Callable[[float], float] | None:
        """A flow's weight factor at ``x``, the fraction of its iteration's bytes sent:
        the product of the progress entries' functions (and this entry's own); None
        when there are none.  InputError naming the rule when one is not a finite
        number > 0.  The same function on every call (its table is built once)."""
        return self._progress_weight

    @cached_property
    def _progress_weight(self) -> Callable[[float], float] | None:
        rules = self._rules("progress", self.progressing)
        if not rules:
            return None

        def weight(x: float) -> float:
            return _product(rules, x, "", f" at progress {x}")

        return weight

    def share(self, spec: JobSpec) -> float:
        """Job ``spec``'s share weight: the product of the weights of the weighted
        entries (and of this entry's own ``weight``); 1 when there are none.
        InputError naming the rule when a weight is not a finite number > 0."""
        return _product(self._rules("weight", self.weighted), spec, f"job {spec.job_id!r} ", "")


def _product(rules: list[tuple[str, Callable]], arg: object, before: str, after: str) -> float:
    """The product of every rule's weight at ``arg``; InputError "sharing rule NAME gave
    {before}weight W{after}" when one is not a finite number > 0."""
    product = 1.0
    for name, rule in rules:
        w = float(rule(arg))
        if not (w > 0 and math.isfinite(w)):
            raise InputError("schedulers", f"sharing rule {name!r} gave {before}weight {w}{after}")
        product *= w
    return product


#: name -> sharing.  Parts combine by or-ing their flags and multiplying their weights
#: (:meth:`Sharing.combine`); a rule that weights jobs, weights flows by their progress
#: or orders jobs strictly is one entry here with its ``weight``, ``progress`` or
#: ``level`` function (docs/extending.md).
SHARINGS: dict[str, Sharing] = {
    "maxmin": Sharing(),
    "mltcp": Sharing(mltcp=True),
    "priority": Sharing(priority=True),
}
