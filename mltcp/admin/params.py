"""MLTCP's rule parameters in the pinned config map: flows use them from their next ACK."""

from __future__ import annotations

from mltcp import layout
from mltcp.pinned import open_map
from mltcp.policy import FLAG_SCALE_CUT, MODES, ONE, MltcpParams


def set_params(params: MltcpParams) -> None:
    """Write the parameters to the pinned config map; ValueError naming the field, before
    anything is written, for a rule the kernel would not hold
    (:meth:`~mltcp.policy.MltcpParams.check_stored`)."""
    params.check_stored()
    with open_map("mltcp_config") as m:
        m.update(layout.U32.pack(0), layout.CONFIG.pack(*params.fixed()))


def read_config() -> tuple[int, int, int, int, int]:
    """The config map's raw fields (slope and intercept Q10, idle µs, mode, flags); all
    zeros in a map no one has written yet."""
    with open_map("mltcp_config") as m:
        raw = m.lookup(layout.U32.pack(0))
    return layout.CONFIG.unpack(raw) if raw else (0, 0, 0, 0, 0)


def get_params() -> MltcpParams:
    """The parameters the loaded controls run with (the pinned config map)."""
    return params_from(read_config())


def params_from(raw: tuple[int, int, int, int, int]) -> MltcpParams:
    """:class:`MltcpParams` of the config map's raw fields (fixed point, as stored)."""
    slope_q, intercept_q, idle_us, mode, flags = raw
    return MltcpParams(
        slope_q / ONE,
        max(intercept_q, 1) / ONE,
        max(idle_us, 1) / 1000,
        MODES[mode] if mode < len(MODES) else "idle",
        bool(flags & FLAG_SCALE_CUT),
    )
