"""Scheduler names: a queue policy and the parts composed with it by ``+``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cassini.errors import InputError
from cassini.sim.parts import KINDS, parts_by_kind
from cassini.sim.parts.placement import PLACEMENT_ALIASES, _pack, candidate_placements
from cassini.sim.parts.queue import (
    EFFICIENCY_LOSS,
    QUEUE_POLICIES,
    Decision,
    finish_time_fairness,
    statistical_efficiency,
)
from cassini.sim.parts.sharing import SHARINGS, Sharing
from cassini.sim.parts.timing import TIMINGS, Timing
from cassini.sim.workload import JobSpec

__all__ = [
    "EFFICIENCY_LOSS",
    "Decision",
    "Scheduler",
    "_pack",
    "candidate_placements",
    "decide",
    "finish_time_fairness",
    "statistical_efficiency",
]

POLICIES = tuple(QUEUE_POLICIES)
PLACEMENTS = ("first", "random", "cassini", "defrag")
#: name parts that stand for several parts: (kind, entry) pairs
BUNDLES: dict[str, tuple[tuple[str, str], ...]] = {
    "cassini": (("placement", "cassini"), ("timing", "held")),
    "crux": (("routing", "crux"), ("sharing", "priority")),
}
#: kinds whose part in a bundle is a default: a part of that kind named on its own
#: replaces it (``themis+cassini+free``: CASSINI's placement, jobs not held to shifts)
BUNDLE_DEFAULTS = frozenset({"timing"})


@dataclass(frozen=True)
class Scheduler:
    """A scheduler's name split into its parts.

    ``policy``: queue policy; ``placement``: ``first`` (packed), ``random`` or
    ``cassini``; ``defrag``: migrate running jobs into fewer racks; ``routing``: None
    (the config's) or a routing part; ``sharing``: the :data:`SHARINGS` entries named,
    combined; ``timing``: the :data:`TIMINGS` entry; ``dedicated_network``: ``ideal``."""

    name: str
    policy: str
    placement: str = "first"
    dedicated_network: bool = False
    defrag: bool = False
    routing: str | None = None
    sharing: Sharing = SHARINGS["maxmin"]
    timing: Timing = TIMINGS["free"]

    @property
    def mltcp(self) -> bool:
        """Flows weighted by MLTCP's F (the sharing entry's rule)."""
        return self.sharing.mltcp

    @property
    def priority(self) -> bool:
        """Links serve Crux's priority classes strictly (the sharing entry's rule)."""
        return self.sharing.priority

    @property
    def held(self) -> bool:
        """Jobs held to their time-shifts' slot grid (the timing entry's rule)."""
        return self.timing.held

    @classmethod
    def parse(cls, name: str) -> Scheduler:
        """Parse ``policy[+part...]`` or ``ideal``; InputError names an unknown part."""
        if name == "ideal":
            return cls(name, "themis", "first", dedicated_network=True)
        tokens = name.split("+")
        policy = tokens[0]
        if policy not in QUEUE_POLICIES:
            raise _unknown(name, policy, "queue policy first")
        chosen: dict[str, set[str]] = {}
        bundled: dict[str, set[str]] = {}  # the bundles' parts of BUNDLE_DEFAULTS kinds
        named: dict[str, str] = {}  # part -> the token that named it (``first``: packed)
        for raw in tokens[1:]:
            token = PLACEMENT_ALIASES.get(raw, raw)
            if token in named:  # themis+crux+crux: ran as themis+crux, unsaid
                raise InputError(
                    "schedulers",
                    f"scheduler {name!r} names part {token!r} twice"
                    + (f" (as {named[token]!r} and {raw!r})" if named[token] != raw else "")
                    + "; give each part once",
                )
            named[token] = raw
            bundle = BUNDLES.get(token, ())
            parts = bundle or tuple(
                (kind, token) for kind, table in KINDS.items() if kind != "queue" and token in table
            )
            if not parts:
                raise _unknown(name, token, "not a part")
            for kind, entry in parts:
                into = bundled if bundle and kind in BUNDLE_DEFAULTS else chosen
                if into is chosen and entry in chosen.get(kind, ()):  # themis+crux+priority
                    raise _given_twice(name, kind, entry, named)
                into.setdefault(kind, set()).add(entry)
        for kind, entries in bundled.items():
            chosen.setdefault(kind, entries)
        placements = chosen.get("placement", set())
        defrag = "defrag" in placements
        placements -= {"defrag", "packed"}
        for kind, allowed in (
            ("placement", placements),
            ("routing", chosen.get("routing", set())),
            ("timing", chosen.get("timing", set())),
        ):
            if len(allowed) > 1:
                raise InputError(
                    "schedulers",
                    f"scheduler {name!r} names {len(allowed)} {kind} parts "
                    f"({', '.join(sorted(allowed))}); give at most one",
                )
        sharing = chosen.get("sharing", set())
        timing = chosen.get("timing", set())
        return cls(
            name,
            policy,
            placement=next(iter(placements), "first"),
            defrag=defrag,
            routing=next(iter(chosen.get("routing", ())), None),
            sharing=Sharing.combine(sharing),
            timing=TIMINGS[next(iter(timing), "free")],
        )

    @property
    def canonical(self) -> str:
        """The name in canonical part order (parses back to an equal scheduler but for
        ``name``)."""
        if self.dedicated_network:
            return "ideal"
        parts = [self.policy]
        crux = self.routing == "crux" and self.priority
        cassini = self.placement == "cassini"  # the bundle, timing held by default
        if self.placement != "first":
            parts.append(self.placement)
        if self.defrag:
            parts.append("defrag")
        if crux:
            parts.append("crux")
        elif self.routing:
            parts.append(self.routing)
        if self.mltcp:
            parts.append("mltcp")
        if self.priority and not crux:
            parts.append("priority")
        parts.extend(self.sharing.functions)
        if self.timing != TIMINGS["held" if cassini else "free"]:
            parts.append(self.timing.name)
        return "+".join(parts)


def _given_twice(name: str, kind: str, entry: str, named: dict[str, str]) -> InputError:
    """A part named on its own that a bundle of the same name already gives."""
    bundles = [t for t, parts in BUNDLES.items() if (kind, entry) in parts and t in named]
    return InputError(
        "schedulers",
        f"scheduler {name!r} gives {kind} part {entry!r} twice (bundle "
        f"{' and '.join(map(repr, bundles))} includes it); give each part once",
    )


def _unknown(name: str, part: str, why: str) -> InputError:
    return InputError(
        "schedulers",
        f"unknown scheduler {name!r}: unknown part {part!r} ({why}); parts by kind: "
        f"{parts_by_kind()}; bundles: cassini = placement cassini + timing held (a timing "
        "part named replaces held), crux = routing crux + sharing priority; or ideal",
    )


def decide(
    policy: str,
    queue: Sequence[JobSpec],
    free_gpus: int,
    now_s: float,
    iteration_time_s: Mapping[str, float],
) -> list[Decision]:
    """Order the queue and size each job with the queue policy ``policy``; the engine
    places them in this order while they fit.  ``iteration_time_s`` is each model's
    dedicated iteration time (s)."""
    try:
        fn = QUEUE_POLICIES[policy]
    except KeyError:
        raise InputError("policy", f"unknown policy {policy!r}") from None
    return fn(queue, free_gpus, now_s, iteration_time_s)
