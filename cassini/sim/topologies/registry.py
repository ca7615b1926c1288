"""The table of topology builders by name, and the ``cluster:`` configuration forms that
pick one:"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cassini import schema
from cassini.errors import InputError
from cassini.sim.topologies.clos import three_tier, two_tier
from cassini.sim.topologies.fabric import Topology
from cassini.sim.topologies.fat_tree import fat_tree
from cassini.sim.topologies.hosts import ColumnConflict, read_host_table
from cassini.sim.topologies.rail import rail_optimised

#: Generators by the name a config's ``generate:`` gives.
GENERATORS: dict[str, Callable[..., Topology]] = {
    "two-tier": two_tier,
    "three-tier": three_tier,
    "fat-tree": fat_tree,
    "rail-optimised": rail_optimised,
}
#: Every builder by name: the generators, and ``hosts`` (a host-table file).
BUILDERS: dict[str, Callable[..., Topology]] = GENERATORS | {"hosts": read_host_table}


def is_topology_form(obj: Any) -> bool:
    """Whether a ``cluster:`` object names a host table or a generator (rather than
    :class:`cassini.sim.topology.Cluster`'s fields)."""
    return isinstance(obj, Mapping) and ("hosts" in obj or "generate" in obj)


def build(obj: Any, field: str = "cluster", base: Path = Path(".")) -> Topology:
    """The topology a ``cluster:`` object describes; a host table's path is relative to
    ``base`` (the config file's folder).  InputError names the bad field."""
    obj = schema.require_object(obj, field)
    if ("hosts" in obj) == ("generate" in obj):
        raise InputError(field, "give exactly one of hosts (a host table) and generate")
    if "hosts" in obj:
        builder, name = read_host_table, "hosts"
        kwargs = {"path": base / schema.identifier(obj["hosts"], schema.join(field, "hosts"))}
        rest = {k: v for k, v in obj.items() if k != "hosts"}
    else:
        name = schema.identifier(obj["generate"], schema.join(field, "generate"))
        if name not in GENERATORS:
            raise InputError(
                schema.join(field, "generate"),
                f"unknown generator {name!r} (known: {', '.join(GENERATORS)})",
            )
        builder, kwargs = GENERATORS[name], {}
        rest = {k: v for k, v in obj.items() if k != "generate"}
    params = inspect.signature(builder).parameters
    accepted = [p for p in params if p != "path"]
    required = [p for p in accepted if params[p].default is inspect.Parameter.empty]
    schema.check_fields(rest, field, required, accepted)
    try:
        return builder(**kwargs, **rest)
    except ColumnConflict as e:  # a setting beside the host table's column: named in full
        raise e.given_as(schema.join(field, e.field)) from None
    except InputError as e:
        if ":" in e.field:  # file:line:column of a host table
            raise
        raise InputError(schema.join(field, e.field), e.problem) from None
