"""Run-wide settings of the simulator's mechanisms (config keys of the same names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cassini.nic_scale import DEFAULT_PROFILE_RULE
from mltcp.policy import MltcpParams

#: MonkeyTree's measured cost of migrating one worker (arXiv 2602.08296), seconds
MIGRATION_S = 9.0


@dataclass(frozen=True)
class SimOptions:
    """``routing``: single, ecmp or crux for every scheduler that names none;
    ``priority_levels``: hardware queues for priority sharing (Crux: K = 8);
    ``mltcp``: MLTCP's parameters (slope, intercept, scale_cut) as the kernel runs them;
    ``migration_s``: seconds a job stalls per migrated worker (one worker per server);
    ``cooldown_s``: seconds after a migration before the job may move again;
    ``network``: how the network model runs — ``windows`` (each group of jobs that share
    links re-simulated from its start-time phases for a few of its longest iterations at
    every change of the group) or ``continuous`` (every job that shares a link stepped
    through simulated time once, its phases kept across changes; for large clusters,
    see :mod:`cassini.sim.network.flowstate`) or ``packet`` (the window rule, each window
    run in ns-3: :mod:`cassini.sim.network.packet`);
    ``profiles``: how a job's library profile meets its server links —
    ``scale-to-nic`` (:func:`cassini.nic_scale.scale_to_nic`: bytes kept, phases sent
    faster on links faster than the 50 Gbit/s NICs the library was measured on) or
    ``as-measured`` (the library's rates whatever the fabric).  The default is
    ``scale-to-nic`` here as in a config file (:mod:`cassini.sim.config`); callers that
    hand the engine profiles already made for their fabric say ``as-measured``."""

    routing: str = "single"
    priority_levels: int = 8
    mltcp: MltcpParams = field(default_factory=MltcpParams)
    migration_s: float = MIGRATION_S
    cooldown_s: float = 300.0
    network: str = "windows"
    profiles: str = DEFAULT_PROFILE_RULE

    def to_dict(self) -> dict[str, Any]:
        """The network settings as the config keys name them, every default filled in
        (``results.json``'s ``settings``): which model ran and with what."""
        m = self.mltcp
        return {
            "network": self.network,
            "routing": self.routing,
            "priority_levels": self.priority_levels,
            "mltcp": {"slope": m.slope, "intercept": m.intercept, "scale_cut": m.scale_cut},
            "defrag": {"migration_s": self.migration_s, "cooldown_s": self.cooldown_s},
        }


#: the network models a run can use (``SimOptions.network``)
NETWORK_MODELS = ("windows", "continuous", "packet")
