"""Cluster topology: servers with GPUs under top-of-rack switches, two or three tiers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from cassini import schema
from cassini.errors import InputError

#: Why a cluster with pods takes no ``spines``: the run and ``topo show`` (which shows
#: the generated fabric, :func:`cassini.sim.topologies.clos.from_cluster`) refuse it alike.
POD_SPINES = (
    "{spines} spines with racks_per_pod: a cluster with pods has one aggregation switch "
    "per pod under one core, so its ToR uplinks are not split over spines (give spines: "
    "1, or describe the fabric with generate: three-tier, aggs_per_pod and cores)"
)

#: What ``spines`` changes on the uniform form: only a routing that picks a spine per job
#: (ecmp, crux) uses the ``tor<r>s<k>`` links; ``single`` takes each rack's summed
#: ``tor<r>`` uplink (``run_warnings`` and ``topo show`` say so).
SINGLE_ROUTING_SPINES = (
    "{spines} spines only matter to ecmp and crux routing{which}: single routing "
    "balances perfectly over each rack's summed tor<r> uplink"
)


@dataclass(frozen=True)
class Cluster:
    """A two- or three-tier GPU cluster; capacities in bits per second."""

    racks: int
    servers_per_rack: int
    gpus_per_server: int
    server_link_bps: float = 50e9
    oversubscription: float = 2.0
    racks_per_pod: int | None = None
    pod_oversubscription: float = 1.0
    spines: int = 1

    def __post_init__(self) -> None:
        for name in ("racks", "servers_per_rack", "gpus_per_server", "spines"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(name, f"must be an integer >= 1, got {value!r}")
        for name in ("server_link_bps", "oversubscription", "pod_oversubscription"):
            schema.number(getattr(self, name), name, positive=True)
        if self.racks_per_pod is not None and (
            not isinstance(self.racks_per_pod, int)
            or self.racks_per_pod < 1
            or self.racks % self.racks_per_pod
        ):
            raise InputError(
                "racks_per_pod",
                f"must be an integer >= 1 dividing racks, got {self.racks_per_pod!r}",
            )
        if self.racks_per_pod is not None and self.spines > 1:
            raise InputError("spines", POD_SPINES.format(spines=self.spines))

    # -- sizes ----------------------------------------------------------------------------
    @property
    def servers(self) -> int:
        return self.racks * self.servers_per_rack

    @property
    def gpus(self) -> int:
        return self.servers * self.gpus_per_server

    @property
    def tiers(self) -> int:
        return 2 if self.racks_per_pod is None else 3

    @property
    def gpus_per_host(self) -> tuple[int, ...]:
        """GPUs of every server (all ``gpus_per_server``), as :class:`Topology` has it."""
        return (self.gpus_per_server,) * self.servers

    @property
    def rack_servers(self) -> tuple[range, ...]:
        """Every rack's servers as a range of indices."""
        spr = self.servers_per_rack
        return tuple(range(r * spr, (r + 1) * spr) for r in range(self.racks))

    def rack_of(self, server: int) -> int:
        return server // self.servers_per_rack

    def pod_of(self, server: int) -> int:
        return 0 if self.racks_per_pod is None else self.rack_of(server) // self.racks_per_pod

    # -- links ----------------------------------------------------------------------------
    @property
    def tor_uplink_bps(self) -> float:
        return self.servers_per_rack * self.server_link_bps / self.oversubscription

    @property
    def pod_uplink_bps(self) -> float:
        assert self.racks_per_pod is not None
        return self.racks_per_pod * self.tor_uplink_bps / self.pod_oversubscription

    @cached_property
    def links(self) -> dict[str, float]:
        """Every link id with its capacity in bits per second."""
        out = {f"srv{i}": float(self.server_link_bps) for i in range(self.servers)}
        out |= {f"tor{r}": float(self.tor_uplink_bps) for r in range(self.racks)}
        if self.racks_per_pod is not None:
            pods = self.racks // self.racks_per_pod
            out |= {f"pod{p}": float(self.pod_uplink_bps) for p in range(pods)}
        if self.spines > 1:
            share = float(self.tor_uplink_bps) / self.spines
            out |= {self.uplink(r, k): share for r in range(self.racks) for k in range(self.spines)}
        return out

    def uplink(self, rack: int, spine: int | None) -> str:
        """Id of rack ``rack``'s uplink to ``spine`` (None, or one spine: the whole uplink)."""
        if spine is None or self.spines == 1:
            return f"tor{rack}"
        return f"tor{rack}s{spine}"

    def path(self, servers: Iterable[int], spine: int | None = None) -> tuple[str, ...]:
        """Links a job's ring crosses when it runs on ``servers`` (server indices), over
        ``spine`` (None: the ToRs' whole uplinks)."""
        used = sorted(set(servers))
        for s in used:
            if not 0 <= s < self.servers:
                raise InputError("servers", f"no server {s} (cluster has {self.servers})")
        if len(used) < 2:
            return ()
        path = [f"srv{s}" for s in used]
        racks = sorted({self.rack_of(s) for s in used})
        if len(racks) > 1:
            path += [self.uplink(r, spine) for r in racks]
            pods = sorted({self.pod_of(s) for s in used})
            if len(pods) > 1:
                path += [f"pod{p}" for p in pods]
        return tuple(path)

    # -- JSON -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "racks": self.racks,
            "servers_per_rack": self.servers_per_rack,
            "gpus_per_server": self.gpus_per_server,
            "server_link_bps": self.server_link_bps,
            "oversubscription": self.oversubscription,
        }
        if self.racks_per_pod is not None:
            out |= {
                "racks_per_pod": self.racks_per_pod,
                "pod_oversubscription": self.pod_oversubscription,
            }
        if self.spines != 1:
            out["spines"] = self.spines
        return out

    @classmethod
    def from_dict(cls, obj: Any, field: str = "cluster") -> Cluster:
        obj = schema.require_object(obj, field)
        required = ("racks", "servers_per_rack", "gpus_per_server")
        optional = (
            "server_link_bps",
            "oversubscription",
            "racks_per_pod",
            "pod_oversubscription",
            "spines",
        )
        schema.check_fields(obj, field, required, optional)
        if "pod_oversubscription" in obj and "racks_per_pod" not in obj:
            raise InputError(
                schema.join(field, "pod_oversubscription"),
                "needs a pod tier: give racks_per_pod (racks under each aggregation switch); "
                "without it the cluster is two-tier",
            )
        kwargs: dict[str, Any] = {}
        for name in required + ("racks_per_pod", "spines"):
            if name in obj:
                kwargs[name] = _integer(obj[name], schema.join(field, name))
        for name in ("server_link_bps", "oversubscription", "pod_oversubscription"):
            if name in obj:
                kwargs[name] = schema.number(obj[name], schema.join(field, name), positive=True)
        try:
            return cls(**kwargs)
        except InputError as e:
            raise InputError(schema.join(field, e.field), e.problem) from None


def _integer(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(field, f"must be an integer >= 1, got {value!r}")
    return value
