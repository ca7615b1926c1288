"""A job's profile on a NIC faster or slower than the one it was measured on (issue 33 §0).

The testbed's rule (``testbed/run/load.py``): an emulated link of ``link_bps`` standing
for a real NIC of ``nic_bps`` carries the model's tensors x :func:`nic_factor`, so that
communication takes as long, relative to compute, as on the real NIC.  The simulator's
``profiles: scale-to-nic`` is the same ratio read the other way: a profile measured on
``measured_nic_bps`` NICs, run on a ``link_bps`` server link, keeps its bytes and sends
them :func:`nic_factor` times faster (:func:`scale_to_nic`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cassini.profile import JobProfile, Phase

#: the NIC rate (bits/s) the profile library was measured at: the CASSINI testbed's
#: 50 Gbit/s NICs (``provenance.nic_bps`` of the library's measured entries); a profile
#: that names none is taken as measured at it
MEASURED_NIC_BPS = 50e9
#: the values of the simulator's ``profiles:`` rule, the default first
PROFILE_RULES = ("scale-to-nic", "as-measured")
DEFAULT_PROFILE_RULE = PROFILE_RULES[0]


@dataclass(frozen=True)
class MeasuredProfile(JobProfile):
    """A profile measured on NICs of ``nic_bps`` bits/s other than
    :data:`MEASURED_NIC_BPS` (a profile file's ``provenance.nic_bps``,
    :func:`cassini.sim.workload.load_library`): :func:`scale_to_nic` and
    :func:`on_link` scale it from that rate."""

    nic_bps: float = MEASURED_NIC_BPS


def measured_nic_bps(profile: JobProfile) -> float:
    """The NIC rate (bits/s) ``profile`` was measured at: its ``nic_bps`` when it is a
    :class:`MeasuredProfile`, else :data:`MEASURED_NIC_BPS`."""
    return profile.nic_bps if isinstance(profile, MeasuredProfile) else MEASURED_NIC_BPS


def nic_factor(link_bps: float, nic_bps: float = MEASURED_NIC_BPS) -> float:
    """``link_bps / nic_bps`` (both bits/s): how much faster a link sends than the NIC it
    is compared with.  The testbed scales a model's tensors by it (its link stands for
    the NIC); :func:`scale_to_nic` scales a profile's phase rates by it."""
    if not link_bps > 0 or not nic_bps > 0:
        raise ValueError(f"rates must be > 0 bits/s, got link {link_bps!r}, NIC {nic_bps!r}")
    return float(link_bps) / float(nic_bps)


def scale_to_nic(profile: JobProfile, link_bps: float, nic_bps: float | None = None) -> JobProfile:
    """``profile`` (measured on ``nic_bps`` NICs; default :func:`measured_nic_bps`, the
    profile's own or 50 Gbit/s) on a job whose server links send ``link_bps`` bits/s.
    With ``f = link_bps / nic_bps``:

    * every phase keeps its bits, is sent at ``rate_bps * f`` bits/s and so lasts
      ``duration_s / f`` seconds (shorter phases, not emptier ones);
    * every phase starts where it started as measured, or when the phase before it ends
      if that is later: a phase starts when the compute that overlaps the phase before it
      (a DDP backward pass producing the next bucket) has made its gradients ready, and
      compute does not get faster with the NIC.  So a phase never starts, nor ends,
      before that compute needs it to; phases that touched as measured keep their starts
      too (conservative: the profile cannot say whether they waited for the network);
    * the compute after the last phase (seconds, up to the first phase of the next
      iteration) is kept: the iteration time is the last phase's new end plus it.

    For ``f >= 1`` no phase and no iteration gets longer, and the iteration is at least
    the measured one less the last phase's saving ``duration_s * (1 - 1/f)``; for
    ``f = 1`` the profile is returned unchanged; for ``f < 1`` phases and the iteration
    get longer.  A phase that wraps past the iteration's end is handled in the frame
    that starts where it ends, and the result is turned back to the profile's frame.
    """
    f = nic_factor(link_bps, measured_nic_bps(profile) if nic_bps is None else nic_bps)
    if f == 1.0 or not profile.phases:
        return profile
    period = profile.iteration_time_s
    origin = max(0.0, max(p.end_s for p in profile.phases) - period)  # end of a wrap
    phases = sorted(profile.phases, key=lambda p: _offset(p.start_s, origin, period))
    scaled: list[Phase] = []
    end = 0.0
    for p in phases:
        start = max(_offset(p.start_s, origin, period), end)
        duration = p.duration_s / f
        scaled.append(Phase(start, duration, p.rate_bps * f))
        end = start + duration
    last = phases[-1]
    tail = period - (_offset(last.start_s, origin, period) + last.duration_s)
    new_period = end + max(tail, 0.0)
    out = tuple(Phase((q.start_s + origin) % new_period, q.duration_s, q.rate_bps) for q in scaled)
    return JobProfile(profile.job_id, new_period, out)


def on_link(profile: JobProfile, link_bps: float, rule: str = DEFAULT_PROFILE_RULE) -> JobProfile:
    """``profile`` (as measured) on a job whose slowest server link sends ``link_bps``
    bits/s, under the ``profiles:`` ``rule``: :func:`scale_to_nic` for ``scale-to-nic``
    (from the NIC the profile was measured on, :func:`measured_nic_bps`), unchanged for
    ``as-measured``.  The one rule the fluid engine and the packet level
    (``network: packet``, ``cassini.packet.run``, ``experiments.sim_vs_packet``) apply."""
    if rule not in PROFILE_RULES:
        raise ValueError(f"profiles rule must be one of {', '.join(PROFILE_RULES)}, got {rule!r}")
    return scale_to_nic(profile, link_bps) if rule == "scale-to-nic" else profile


def _offset(start_s: float, origin_s: float, period_s: float) -> float:
    """``start_s - origin_s`` on the circle of ``period_s`` (seconds, in [0, period)); a
    start a rounding error before ``origin_s`` (a phase that begins where the wrap ends)
    is at 0, not a whole period later."""
    off = (start_s - origin_s) % period_s
    return 0.0 if off > period_s * (1 - 1e-9) else off
