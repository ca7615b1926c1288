"""Host tables: a CSV with one row per host naming its ToR, aggregation and core switch."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cassini.errors import InputError
from cassini.sim.topologies.fabric import FabricBuilder, Topology
from cassini.sim.topologies.params import check_int, check_positive

#: The Lingjun header's columns and the role of each.
LINGJUN_COLUMNS = {"ip": "host", "DSW": "core", "PSW": "agg", "ASW": "tor"}
#: Our header's columns.
OUR_COLUMNS = ("host", "tor", "agg", "core", "gpus", "host_bps", "tor_uplink_bps", "agg_uplink_bps")
#: Parameters and the column that gives the same quantity.
PARAMETER_COLUMN = {
    "gpus_per_server": "gpus",
    "server_link_bps": "host_bps",
    "oversubscription": "tor_uplink_bps",
    "pod_oversubscription": "agg_uplink_bps",
}
DEFAULTS = {"server_link_bps": 50e9, "oversubscription": 2.0, "pod_oversubscription": 1.0}
#: The switch each per-switch column gives a value of, as its errors name it.
SWITCH_OF_COLUMN = {"tor_uplink_bps": "ToR", "agg_uplink_bps": "aggregation switch"}


class ColumnConflict(InputError):
    """A parameter given beside the host table's column for the same quantity.  The
    message names the parameter as the user gave it: :meth:`given_as` renames it
    (``cluster.gpus_per_server`` in a config, ``--gpus-per-server`` on ``topo show``,
    ``sweep.oversubscription`` for a sweep axis)."""

    def __init__(self, path: Path, column: str, given: str) -> None:
        self.path, self.column = path, column
        super().__init__(
            given,
            f"{path} has a {column} column, so {given} must not be given: remove one "
            "of the two",
        )

    def given_as(self, given: str) -> ColumnConflict:
        """This conflict with the parameter named ``given``."""
        return ColumnConflict(self.path, self.column, given)


@dataclass(frozen=True)
class HostRow:
    """One host as its row gives it; ``cells`` maps a role to (value, column number)."""

    line: int
    cells: dict[str, tuple[str, int]]

    def text(self, role: str, default: str = "") -> str:
        return self.cells[role][0] if role in self.cells else default


def read_host_table(
    path: Path | str,
    *,
    gpus_per_server: int | None = None,
    server_link_bps: float | None = None,
    oversubscription: float | None = None,
    pod_oversubscription: float | None = None,
) -> Topology:
    """Read a host table (Lingjun ``topo.csv`` or ours) into a :class:`Topology`."""
    path = Path(path)
    params: dict[str, Any] = {
        "gpus_per_server": gpus_per_server,
        "server_link_bps": server_link_bps,
        "oversubscription": oversubscription,
        "pod_oversubscription": pod_oversubscription,
    }
    rows, roles, fmt = _read_rows(path)
    for name, value in params.items():
        if value is None:
            continue
        if PARAMETER_COLUMN[name] in roles:
            raise ColumnConflict(path, PARAMETER_COLUMN[name], name)
        if name == "gpus_per_server":
            check_int(name, value)
        else:
            check_positive(name, value)
        if name == "pod_oversubscription" and "agg" not in roles:
            raise InputError(
                name,
                f"needs a pod tier: {path} has no agg column (aggregation switches), "
                "so its fabric is two-tier",
            )
    if "gpus" not in roles and gpus_per_server is None:
        raise InputError("gpus_per_server", f"required: {path} has no gpus column")
    given = {k: v for k, v in params.items() if v is not None}
    settings = DEFAULTS | given
    topo = _build(path, rows, roles, settings)
    source = {"hosts": str(path.resolve()), **given}
    return replace(topo, kind=fmt, source=source)


def _read_rows(path: Path) -> tuple[list[HostRow], set[str], str]:
    from cassini import files

    try:  # missing, a folder, unreadable, empty or binary: one line naming the file
        text = files.read_text(path)
    except InputError as e:
        raise InputError("hosts", str(e)) from None
    with io.StringIO(text, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise InputError(f"{path}:1:1", "empty file; expected a header row")
        names = [h.strip() for h in header]
        if set(names) == set(LINGJUN_COLUMNS) and len(names) == len(LINGJUN_COLUMNS):
            fmt, roles = "lingjun", [LINGJUN_COLUMNS[n] for n in names]
        elif set(names) & set(LINGJUN_COLUMNS):
            raise _not_lingjun(path, names)
        else:
            fmt, roles = "hosts", _our_roles(path, names)
        rows = []
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) > len(roles):
                raise InputError(
                    f"{path}:{line}:{len(roles) + 1}",
                    f"extra cell {row[len(roles)]!r}: the header has {len(roles)} columns",
                )
            cells = {}
            for col, role in enumerate(roles, start=1):
                if col > len(row):
                    raise InputError(f"{path}:{line}:{col}", f"{names[col - 1]}: missing")
                value = row[col - 1].strip()
                if not value:
                    raise InputError(f"{path}:{line}:{col}", f"{names[col - 1]}: empty")
                cells[role] = (value, col)
            rows.append(HostRow(line, cells))
    if not rows:
        raise InputError(f"{path}:2:1", "no hosts: a host table needs one row per host")
    return rows, set(roles), fmt


def _not_lingjun(path: Path, names: list[str]) -> InputError:
    """The error for a header with some of Lingjun's columns but not exactly them."""
    expected = ",".join(LINGJUN_COLUMNS)
    seen: set[str] = set()
    for col, name in enumerate(names, start=1):
        if name not in LINGJUN_COLUMNS or name in seen:
            what = "appears twice" if name in seen else "is not one of them"
            return InputError(
                f"{path}:1:{col}", f"expected the Lingjun header {expected}: {name!r} {what}"
            )
        seen.add(name)
    missing = [n for n in LINGJUN_COLUMNS if n not in seen]
    return InputError(
        f"{path}:1:{len(names) + 1}", f"expected the Lingjun header {expected}: missing {missing}"
    )


def _our_roles(path: Path, names: list[str]) -> list[str]:
    seen: set[str] = set()
    for col, name in enumerate(names, start=1):
        if name not in OUR_COLUMNS:
            raise InputError(
                f"{path}:1:{col}",
                f"unknown column {name!r}: expected the Lingjun header ip,DSW,PSW,ASW or "
                f"columns from {', '.join(OUR_COLUMNS)}",
            )
        if name in seen:
            raise InputError(f"{path}:1:{col}", f"column {name!r} appears twice")
        seen.add(name)
    for name in ("host", "tor"):
        if name not in seen:
            raise InputError(f"{path}:1:1", f"missing column {name!r} (host,tor are required)")
    if "core" in seen and "agg" not in seen:
        raise InputError(f"{path}:1:{names.index('core') + 1}", "a core column needs an agg column")
    if "agg_uplink_bps" in seen and "agg" not in seen:
        raise InputError(
            f"{path}:1:{names.index('agg_uplink_bps') + 1}",
            "agg_uplink_bps: needs a pod tier: an agg column (aggregation switches); "
            "without one the fabric is two-tier",
        )
    return names


def _number(path: Path, row: HostRow, role: str, integer: bool = False) -> float:
    text, col = row.cells[role]
    where = f"{path}:{row.line}:{col}"
    try:
        value = float(text)
    except ValueError:
        raise InputError(where, f"{role}: not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(where, f"{role}: must be > 0, got {text}")
    if integer and value != int(value):
        raise InputError(where, f"{role}: must be a whole number, got {text}")
    return value


def _natural(key: Iterable[str]) -> tuple[tuple[Any, ...], ...]:
    """Sort key that puts S2 before S10."""
    return tuple(
        tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", part)) for part in key
    )


def _agreed(path: Path, rows: list[HostRow], role: str, group: Any) -> dict[Any, float]:
    """One value of ``role`` per group (a ToR or aggregation switch); InputError when two
    rows of a group disagree."""
    out: dict[Any, tuple[float, int]] = {}
    for row in rows:
        value, key = _number(path, row, role), group(row)
        if key in out and out[key][0] != value:
            first_value, first_line = out[key]
            raise InputError(
                f"{path}:{row.line}:{row.cells[role][1]}",
                f"{role}: {value:g} differs from {first_value:g} on line {first_line} "
                f"for the same {SWITCH_OF_COLUMN[role]} {'/'.join(k for k in key if k)!r}",
            )
        out.setdefault(key, (value, row.line))
    return {k: v for k, (v, _) in out.items()}


def _check_hosts_and_core(path: Path, rows: list[HostRow], roles: set[str]) -> None:
    """Every host named once; at most one core switch in the table."""
    seen: dict[str, int] = {}
    for row in rows:
        name, col = row.cells["host"]
        if name in seen:
            raise InputError(
                f"{path}:{row.line}:{col}", f"host {name!r} already on line {seen[name]}"
            )
        seen[name] = row.line
    if "core" in roles:
        first = rows[0]
        for row in rows:
            if row.text("core") != first.text("core"):
                raise InputError(
                    f"{path}:{row.line}:{row.cells['core'][1]}",
                    f"core {row.text('core')!r} differs from {first.text('core')!r} on line "
                    f"{first.line}: a host table may name one core switch (hosts under "
                    "different cores would have no path between them)",
                )


def _build(path: Path, rows: list[HostRow], roles: set[str], settings: dict[str, Any]) -> Topology:
    _check_hosts_and_core(path, rows, roles)

    def tor_key(row: HostRow) -> tuple[str, str, str]:
        return (row.text("core"), row.text("agg"), row.text("tor"))

    def agg_key(row: HostRow) -> tuple[str, str]:
        return (row.text("core"), row.text("agg"))

    three_tier = "agg" in roles
    gpus = {
        row.line: int(_number(path, row, "gpus", integer=True))
        if "gpus" in roles
        else int(settings["gpus_per_server"])
        for row in rows
    }
    host_bps = {
        row.line: _number(path, row, "host_bps")
        if "host_bps" in roles
        else float(settings["server_link_bps"])
        for row in rows
    }
    tor_rows: dict[tuple[str, str, str], list[HostRow]] = {}
    for row in rows:
        tor_rows.setdefault(tor_key(row), []).append(row)
    if "tor_uplink_bps" in roles:
        tor_up = _agreed(path, rows, "tor_uplink_bps", tor_key)
    else:
        tor_up = {
            k: sum(host_bps[r.line] for r in members) / settings["oversubscription"]
            for k, members in tor_rows.items()
        }
    tors_of_agg: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for key in sorted(tor_rows, key=_natural):
        tors_of_agg.setdefault(key[:2], []).append(key)
    if "agg_uplink_bps" in roles:
        agg_up = _agreed(path, rows, "agg_uplink_bps", agg_key)
    else:
        agg_up = {
            a: sum(tor_up[t] for t in tors) / settings["pod_oversubscription"]
            for a, tors in tors_of_agg.items()
        }

    b = FabricBuilder(("tor", "agg", "core") if three_tier else ("tor", "spine"))
    if three_tier:
        cores = {
            c: b.switch("core", c or "core")
            for c in sorted({a[0] for a in tors_of_agg}, key=lambda c: _natural([c]))
        }
    else:
        spine = b.switch("spine", "spine")
    for pod, (agg, tors) in enumerate(tors_of_agg.items()):
        if three_tier:
            upper = b.switch("agg", "/".join(p for p in agg if p))
            b.link(upper, cores[agg[0]], agg_up[agg])
        else:
            upper, pod = spine, 0
        for key in tors:
            tor = b.switch("tor", "/".join(p for p in key if p))
            b.link(tor, upper, tor_up[key])
            members = tor_rows[key]
            b.rack(
                [(r.text("host"), gpus[r.line]) for r in members],
                (tor,),
                pod,
                [host_bps[r.line] for r in members],
            )
    return b.build("hosts", {})
