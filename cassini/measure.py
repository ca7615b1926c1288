"""Profiles from measurements: a DDP communication-hook log, a worker's timing log, or a
packet capture.

Everything here turns records into a :class:`cassini.profile.JobProfile` and is pure,
except the two readers at the end of the module (:func:`read_jsonl`, :func:`pcap_packets`),
which open a file and nothing else.  scapy is imported only by the capture reader.

Recorder log (JSON lines, written by :class:`cassini.torch.recorder.CommHookRecorder`)::

    {"type": "meta", "world_size": 2, "rank": 0}
    {"type": "iteration", "iteration": 3, "start_s": 1700000000.12}
    {"type": "bucket", "iteration": 3, "bucket": 0, "bytes": 1048576,
     "start_s": 1700000000.15, "end_s": 1700000000.16}

Worker log (testbed workers): ``{"iter", "start", "comm_start", "end", "bytes_sent"}`` per
iteration.  Capture: IPv4 packets from one source address, as tcpdump, dumpcap or
tshark write them (pcap or pcapng).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import os
import struct
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cassini import schema
from cassini.agent import MAX_RATE_BPS
from cassini.agent import MIN_PERIOD_S as MIN_TIME_S
from cassini.errors import InputError
from cassini.profile import JobProfile, Phase


@dataclass(frozen=True)
class BucketRecord:
    """One gradient bucket's all-reduce: ``bytes`` of the bucket's tensor, launched at
    ``start_s`` and completed at ``end_s`` (wall clock, seconds) in iteration ``iteration``."""

    iteration: int
    bucket: int
    bytes: int
    start_s: float
    end_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "bucket",
            "iteration": self.iteration,
            "bucket": self.bucket,
            "bytes": self.bytes,
            "start_s": self.start_s,
            "end_s": self.end_s,
        }


@dataclass(frozen=True)
class RecorderLog:
    """A recorder log read back: bucket records, iteration starts (wall clock, seconds,
    by iteration index; empty when iterations were detected from bucket 0) and the
    job's world size (None when the log does not say)."""

    records: tuple[BucketRecord, ...]
    iteration_starts_s: dict[int, float]
    world_size: int | None


def ring_allreduce_bytes(tensor_bytes: float, world_size: int) -> float:
    """Bytes one rank sends in a ring all-reduce of a ``tensor_bytes`` tensor among
    ``world_size`` ranks: ``2 (n - 1) / n * tensor_bytes``."""
    return 2.0 * (world_size - 1) / world_size * tensor_bytes


def profile_from_buckets(
    job_id: str,
    records: Sequence[BucketRecord],
    world_size: int,
    iteration_starts_s: Mapping[int, float] | Sequence[float] | None = None,
    *,
    skip: int = 1,
    merge_gap_s: float = 0.0,
    communicates: bool = False,
) -> JobProfile:
    """A multi-phase profile from N iterations of DDP bucket records (one rank's).

    Iteration time: median interval between consecutive iteration starts
    (``iteration_starts_s`` by iteration index, e.g. from ``mark_iteration``; else the
    launch of each iteration's first bucket).  Each bucket becomes a phase that moves
    what a ring all-reduce sends from one rank (:func:`ring_allreduce_bytes`) in its
    measured duration; start and end offsets from the iteration start are medians over
    the iterations with the most common bucket layout (bytes by bucket index: DDP
    rebuilds its buckets after the first iteration), folded onto one iteration, and
    phases that overlap or lie within ``merge_gap_s`` seconds of each other are merged
    (their bits kept).  The first ``skip`` iterations (warm-up) are left out.

    Bits per iteration are exact: the sum over the layout's buckets.

    Raises
    ------
    InputError naming the field: no records, world size < 1, fewer than two iterations
    (with a start, given ``iteration_starts_s``); with ``communicates`` (as
    :func:`profile_from_log`) no traffic (world size 1, or only empty buckets).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InputError("world_size", f"must be an integer >= 1, got {world_size!r}")
    if skip < 0:
        raise InputError("skip", f"must be >= 0, got {skip!r}")
    if merge_gap_s < 0:
        raise InputError("merge_gap_s", f"must be >= 0, got {merge_gap_s!r}")
    if isinstance(iteration_starts_s, Sequence):
        iteration_starts_s = dict(enumerate(iteration_starts_s))
    by_iter: dict[int, dict[int, BucketRecord]] = {}
    for i, r in enumerate(records):
        if r.end_s < r.start_s:
            raise InputError(f"records[{i}].end_s", "must not be before start_s")
        if r.bytes < 0:
            raise InputError(f"records[{i}].bytes", f"must be >= 0, got {r.bytes}")
        by_iter.setdefault(r.iteration, {})[r.bucket] = r
    if not by_iter:
        raise InputError("records", "no bucket records")
    iters = sorted(by_iter)[skip:]
    if len(iters) < 2:
        raise InputError(
            "records",
            f"need at least {skip + 2} iterations with bucket records (2 after the {skip} "
            f"skipped), got {len(by_iter)}",
        )
    if iteration_starts_s is not None:
        _check_starts_match(sorted(by_iter), skip, iteration_starts_s)
        iters = [k for k in iters if k in iteration_starts_s]
        origin = {k: float(iteration_starts_s[k]) for k in iters}
    else:
        origin = {k: min(r.start_s for r in by_iter[k].values()) for k in iters}
    starts = np.array([origin[k] for k in iters])
    gaps = np.diff(starts) / np.diff(np.array(iters, float))  # tolerate missing iterations
    period = float(np.median(gaps))
    if not period > 0:
        raise InputError("records", "iteration starts do not increase")
    layouts = {k: tuple(sorted((b, r.bytes) for b, r in by_iter[k].items())) for k in iters}
    layout = Counter(layouts.values()).most_common(1)[0][0]
    used = [k for k in iters if layouts[k] == layout]
    per_rank_bits = 8.0 * ring_allreduce_bytes(1.0, world_size)
    intervals = []
    for bucket, size in layout:
        if size == 0 or per_rank_bits == 0:
            continue
        lo = float(np.median([by_iter[k][bucket].start_s - origin[k] for k in used]))
        hi = float(np.median([by_iter[k][bucket].end_s - origin[k] for k in used]))
        intervals.append((lo, max(hi, lo), size * per_rank_bits))
    phases = fold_phases(intervals, period, merge_gap_s)
    if communicates and not phases:
        _no_traffic(world_size, len(used))
    return JobProfile(job_id, period, phases)


def _no_traffic(world_size: int, iterations: int) -> None:
    """InputError: a recorder log whose profile has no phases, as a worker log that sends
    nothing is refused (:func:`profile_from_log`)."""
    why = (
        "world size 1: a ring all-reduce among one rank sends nothing"
        if world_size == 1
        else f"every bucket holds 0 bytes in the {iterations} iterations of the common layout"
    )
    raise InputError(
        "records",
        f"no bytes sent: {why}; a job that never communicates has no profile to advise on",
    )


def _span(keys: Sequence[int]) -> str:
    """Iteration indices as ``a-b`` (or ``a``)."""
    lo, hi = min(keys), max(keys)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _check_starts_match(buckets: Sequence[int], skip: int, starts: Mapping[int, float]) -> None:
    """InputError unless at least two of the bucket iterations after the ``skip`` skipped
    (of ``buckets``, sorted) have a start in ``starts`` (the log's ``iteration`` lines)."""
    iters = buckets[skip:]
    matched = sum(k in starts for k in iters)
    if matched >= 2:
        return
    what = (
        "no bucket iteration"
        if matched == 0
        else f"only {matched} of the {len(iters)} bucket iterations"
    )
    lines = f"start lines for {_span(list(starts))}" if starts else "the log has none"
    raise InputError(
        "records",
        f"{what} after the {skip} skipped (buckets for {_span(buckets)}) has a matching "
        f"`iteration` start line ({lines}); 2 are needed",
    )


def fold_phases(
    intervals: Sequence[tuple[float, float, float]], period_s: float, merge_gap_s: float = 0.0
) -> tuple[Phase, ...]:
    """Phases of one iteration from ``(start_s, end_s, bits)`` intervals measured from an
    iteration start: starts are taken modulo ``period_s``, intervals that overlap or lie
    within ``merge_gap_s`` seconds of each other (around the circle too) become one phase
    sending their summed bits at a constant rate; total length is capped at the period.

    Every phase is one the service accepts: at least its shortest time
    (:data:`cassini.agent.MIN_PERIOD_S`) and at most its fastest rate
    (:data:`cassini.agent.MAX_RATE_BPS`), the service's bounds.  A shorter or faster phase (a bucket
    whose start and end were read at one clock tick had become 2e-10 s at 6e16 bit/s) is
    widened from its start until it is neither, and merged with any phase it then
    reaches, its bits kept.  InputError when the period is shorter than that time or the
    bits are more than that rate moves in a period."""
    if not period_s >= MIN_TIME_S:
        raise InputError(
            "iteration_time_s", f"{period_s:g} s is shorter than the least {MIN_TIME_S:g} s"
        )
    spans = []
    for lo, hi, bits in intervals:
        if bits > 0:
            start = float(lo) % period_s
            start = 0.0 if start >= period_s else start  # a tiny negative start's modulo
            spans.append([start, start + min(max(hi - lo, 0.0), period_s), float(bits)])
    total = sum(bits for _, _, bits in spans)
    if total > MAX_RATE_BPS * period_s:
        raise InputError(
            "records",
            f"{total:g} bits per iteration of {period_s:g} s is more than {MAX_RATE_BPS:g} "
            "bits/s, the fastest rate a profile may have",
        )
    merged = _merge_on_circle(sorted(spans), period_s, merge_gap_s)
    while True:
        widened = [
            [lo, min(max(hi, lo + MIN_TIME_S, lo + bits / MAX_RATE_BPS), lo + period_s), bits]
            for lo, hi, bits in merged
        ]
        if widened == merged:
            break
        merged = _merge_on_circle(widened, period_s, merge_gap_s)
    out = []
    for lo, hi, bits in merged:
        dur = min(max(hi - lo, MIN_TIME_S), period_s)  # max: hi - lo may round under it
        out.append(Phase(lo, dur, min(bits / dur, MAX_RATE_BPS)))
    return tuple(out)


def _merge_on_circle(
    spans: Sequence[list[float]], period_s: float, merge_gap_s: float
) -> list[list[float]]:
    """``[start_s, end_s, bits]`` spans sorted by start, those that overlap or lie within
    ``merge_gap_s`` seconds of each other merged (their bits summed), around the circle
    of ``period_s`` too: the last may reach past the start of the first."""
    merged: list[list[float]] = []
    for lo, hi, bits in spans:
        if merged and lo <= merged[-1][1] + merge_gap_s:
            merged[-1][1] = max(merged[-1][1], hi)
            merged[-1][2] += bits
        else:
            merged.append([lo, hi, bits])
    while len(merged) > 1 and merged[-1][1] + merge_gap_s >= merged[0][0] + period_s:
        last = merged.pop()
        first = merged[0]
        merged[0] = [last[0], max(last[1], first[1] + period_s), last[2] + first[2]]
        merged.sort(key=lambda m: m[0])
    return merged


def bucket_records_from_dicts(lines: Sequence[Any], source: str = "log") -> RecorderLog:
    """Read recorder log lines (parsed JSON objects, see the module docstring)."""
    records, starts, world = [], {}, None
    for i, obj in enumerate(lines):
        f = f"{source}[{i}]"
        obj = schema.require_object(obj, f)
        kind = obj.get("type", "bucket")
        if kind == "meta":
            schema.check_fields(obj, f, ("type", "world_size"), ("rank", "job_id"))
            w = obj["world_size"]
            if isinstance(w, bool) or not isinstance(w, int) or w < 1:
                raise InputError(f"{f}.world_size", f"must be an integer >= 1, got {w!r}")
            world = w
        elif kind == "iteration":
            schema.check_fields(obj, f, ("type", "iteration", "start_s"))
            starts[_int(obj["iteration"], f"{f}.iteration")] = schema.number(
                obj["start_s"], f"{f}.start_s"
            )
        elif kind == "bucket":
            schema.check_fields(
                obj, f, ("iteration", "bucket", "bytes", "start_s", "end_s"), ("type",)
            )
            records.append(
                BucketRecord(
                    _int(obj["iteration"], f"{f}.iteration"),
                    _int(obj["bucket"], f"{f}.bucket"),
                    _int(obj["bytes"], f"{f}.bytes"),
                    schema.number(obj["start_s"], f"{f}.start_s"),
                    schema.number(obj["end_s"], f"{f}.end_s"),
                )
            )
        else:
            raise InputError(f"{f}.type", f"must be meta, iteration or bucket, got {kind!r}")
    return RecorderLog(tuple(records), starts, world)


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(field, f"must be an integer >= 0, got {value!r}")
    return value


# -- worker logs ------------------------------------------------------------------------
WORKER_FIELDS = ("start", "comm_start", "end", "bytes_sent")


def iteration_times(records: Sequence[Mapping[str, Any]]) -> list[float]:
    """Seconds between successive iteration ends (the first iteration, which includes the
    start-up and any initial shift, has no predecessor and is left out)."""
    ends = [r["end"] for r in records]
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


def iteration_starts(lines: Sequence[Any], skip: int = 1, source: str = "log") -> list[float]:
    """Iteration starts (wall clock, seconds) from a testbed worker log (``start`` of each
    record) or a recorder log (its ``iteration`` lines, read by
    :func:`bucket_records_from_dicts`; a log with any ``type`` field is read as one), in
    order, the first ``skip`` left out.

    Raises InputError naming the line without a start or the recorder line that is
    malformed, or ``source`` when fewer than two starts are left."""
    if any(isinstance(obj, Mapping) and "type" in obj for obj in lines):
        by_index = bucket_records_from_dicts(lines, source).iteration_starts_s
        starts = [by_index[k] for k in sorted(by_index)]
    else:
        starts = []
        for i, obj in enumerate(lines):
            obj = schema.require_object(obj, f"{source}[{i}]")
            if "start" not in obj:
                raise InputError(f"{source}[{i}].start", "missing required field")
            starts.append(schema.number(obj["start"], f"{source}[{i}].start"))
    if len(starts) < skip + 2:
        raise InputError(source, f"need at least {skip + 2} iteration starts, got {len(starts)}")
    return starts[skip:]


def profile_from_log(
    job_id: str,
    records: Sequence[Mapping[str, Any]],
    skip: int = 1,
    source: str = "log",
    *,
    communicates: bool = False,
) -> JobProfile:
    """A job's profile from its timing log (one worker): iteration time = median interval
    between iteration ends; one communication phase starting after the median compute
    time, lasting the median communication time, at the rate that moves the median bytes
    in that time; when the two medians add up to more than the period (iterations
    alternating 100 and 120 ms gave 72 + 48 ms in 110), the phase keeps its duration
    and starts that long before the iteration's end, which it then reaches, not passes.
    Medians, not means: a host's hiccup in a short profiling run (one 147 ms iteration,
    or a few slow ones, among ~105 ms) would otherwise stretch the profile, and the
    advice then sees two equal jobs as incompatible (score 0.85 for the compatible pair
    on the testbed, where the medians give 1.0).

    Raises InputError naming the field of a record that lacks a number, whose times run
    backwards (``comm_start`` before ``start``, ``end`` before ``comm_start``) or whose
    ``bytes_sent`` is negative, or ``source`` when there are fewer than ``skip + 2``
    iterations.  ``communicates``: the job must send (``cassini profile``): no bytes in
    the profiled iterations is an error too, not a profile without phases (a one-rank
    testbed job's log legitimately sends none)."""
    for i, r in enumerate(records):
        r = schema.require_object(r, f"{source}[{i}]")
        for name in WORKER_FIELDS:
            if name not in r:
                raise InputError(f"{source}[{i}].{name}", "missing required field")
            schema.number(r[name], f"{source}[{i}].{name}")
        if r["comm_start"] < r["start"]:
            raise InputError(
                f"{source}[{i}].comm_start",
                f"{r['comm_start']:g} is before start {r['start']:g}",
            )
        if r["end"] < r["comm_start"]:
            raise InputError(
                f"{source}[{i}].end", f"{r['end']:g} is before comm_start {r['comm_start']:g}"
            )
        if r["bytes_sent"] < 0:
            raise InputError(f"{source}[{i}].bytes_sent", f"must be >= 0, got {r['bytes_sent']!r}")
    recs = list(records)[skip:]
    if len(recs) < 2:
        raise InputError(
            source,
            f"need at least {skip + 2} iteration records to profile ({skip} warm-up left out, "
            f"then 2), got {len(records)}",
        )
    period = float(np.median(iteration_times(recs)))
    if not period > 0:
        raise InputError(f"{source}.end", "iteration ends do not increase")
    compute = float(np.median([r["comm_start"] - r["start"] for r in recs]))
    comm = float(np.median([r["end"] - r["comm_start"] for r in recs]))
    sent = float(np.median([r["bytes_sent"] for r in recs]))
    if communicates:
        if not any(r["bytes_sent"] > 0 for r in recs):
            raise InputError(
                f"{source}.bytes_sent",
                f"no bytes were sent: 0 in every profiled record ({len(recs)} after {skip} "
                "warm-up); a job that never communicates has no profile to advise on",
            )
        if not sent > 0:
            raise InputError(
                f"{source}.bytes_sent",
                f"0 in most profiled iterations ({sum(r['bytes_sent'] == 0 for r in recs)} "
                f"of {len(recs)}): the median iteration sends nothing",
            )
        if not comm > 0:
            raise InputError(
                f"{source}.end",
                "equals comm_start in most profiled iterations: bytes sent in no time",
            )
    comm = min(comm, period * 0.999)
    start = min(max(compute, 0.0), period - comm)
    phases = [Phase(start, comm, sent * 8 / comm)] if sent > 0 and comm > 0 else []
    return JobProfile(job_id, period, phases)


# -- packet captures --------------------------------------------------------------------
def series_from_packets(
    stamps_s: Sequence[float] | np.ndarray,
    sizes_bytes: Sequence[float] | np.ndarray,
    dt_s: float,
    window_s: tuple[float, float] | None = None,
) -> tuple[np.ndarray, float]:
    """Bits per second in each ``dt_s`` bin from packet timestamps (s) and sizes (bytes);
    returns the series and its start (seconds): the first timestamp, or with ``window_s``
    ``(start, end)`` (wall clock, seconds) the window's start, the series then covering
    exactly ``[start, end)`` with the packets outside it left out."""
    t = np.asarray(stamps_s, float)
    sizes = np.asarray(sizes_bytes, float)
    dt_s = schema.number(dt_s, "dt_s", positive=True)
    n_bins = None
    if window_s is not None:
        lo = schema.number(window_s[0], "window_s[0]")
        hi = schema.number(window_s[1], "window_s[1]")
        if not hi > lo:
            raise InputError("window_s", f"end {hi!r} must be after start {lo!r}")
        keep = (t >= lo) & (t < hi)
        t, sizes, start = t[keep], sizes[keep], lo
        n_bins = max(1, int(round((hi - lo) / dt_s)))
    if t.size == 0:
        raise InputError("packets", "no packets" + (" in the window" if window_s else ""))
    if window_s is None:
        start = float(t.min())
    bins = ((t - start) / dt_s).astype(np.int64)
    if n_bins is not None:
        bins = np.minimum(bins, n_bins - 1)
    series = np.bincount(bins, weights=sizes * 8, minlength=n_bins or 0) / dt_s
    return series, start


def fold_by_iteration(
    stamps_s: Sequence[float] | np.ndarray,
    sizes_bytes: Sequence[float] | np.ndarray,
    iteration_starts_s: Sequence[float] | Mapping[int, float],
    dt_s: float,
) -> tuple[np.ndarray, float]:
    """One iteration's mean rate (bits/s), every packet placed at its time since the
    start of its own iteration.

    ``iteration_starts_s`` (wall clock, seconds, increasing; or a mapping from iteration
    index to start, as :attr:`RecorderLog.iteration_starts_s`): N + 1 starts bound N
    iterations; packets outside ``[first, last)`` are left out.  The period is the median
    interval.  Unlike a fold at one period (:func:`cassini.profile.fold`), iterations
    that run longer or shorter than the period do not slide the phases of the ones after
    them: 0.8 ms per iteration over 20 iterations moved a 55 ms phase 16 ms earlier and
    smeared it over 60 ms.  A packet sent later than one period after its iteration's
    start (a long iteration's tail) wraps to the start of the circle, where it would
    fall had that iteration lasted exactly one period.  Returns the folded series
    (``round(period / dt_s)`` equal bins spanning the period, each ``period / bins``
    seconds, about ``dt_s``) and the period (seconds)."""
    dt_s = schema.number(dt_s, "dt_s", positive=True)
    if isinstance(iteration_starts_s, Mapping):
        iteration_starts_s = [iteration_starts_s[k] for k in sorted(iteration_starts_s)]
    starts = np.asarray(
        [schema.number(v, f"iteration_starts_s[{i}]") for i, v in enumerate(iteration_starts_s)]
    )
    if starts.size < 2:
        raise InputError("iteration_starts_s", f"need >= 2 starts, got {starts.size}")
    steps = np.diff(starts)
    if not np.all(steps > 0):
        i = int(np.argmin(steps > 0)) + 1
        raise InputError(
            f"iteration_starts_s[{i}]", f"must be after the start before it ({starts[i - 1]!r})"
        )
    period = float(np.median(steps))
    n_bins = max(1, int(round(period / dt_s)))
    t = np.asarray(stamps_s, float)
    sizes = np.asarray(sizes_bytes, float)
    keep = (t >= starts[0]) & (t < starts[-1])
    t, sizes = t[keep], sizes[keep]
    if t.size == 0:
        raise InputError("packets", "no packets between the first and the last iteration start")
    since = t - starts[np.searchsorted(starts, t, side="right") - 1]
    # bin counted in bins with a guard, as fold does: a packet on a bin edge stays there
    bins = np.floor(since * (n_bins / period) + 1e-6).astype(np.int64) % n_bins
    bits = np.bincount(bins, weights=sizes * 8, minlength=n_bins)
    return bits / (starts.size - 1) / (period / n_bins), period


def profile_from_series(
    job_id: str,
    series_bps: np.ndarray,
    start_s: float,
    dt_s: float,
    origin_s: float | None = None,
    **kwargs: Any,
) -> JobProfile:
    """A profile from a bandwidth series (:meth:`JobProfile.from_samples`); with
    ``origin_s`` (wall clock, seconds: an iteration start) it is rotated so that its
    time 0 is an iteration start, as the time-shift agent counts; otherwise time 0 is
    wherever the series began (``start_s``)."""
    profile = JobProfile.from_samples(series_bps, dt_s, job_id=job_id, **kwargs)
    if origin_s is None:
        return profile
    period = profile.iteration_time_s
    offset = (origin_s - start_s) % period
    phases = [
        Phase((p.start_s - offset) % period, p.duration_s, p.rate_bps) for p in profile.phases
    ]
    return JobProfile(job_id, period, phases)


# -- readers (the only I/O in this module) ---------------------------------------------
def read_jsonl(path: Path | str, source: str = "log") -> list[Any]:
    """The JSON objects of a JSON-lines file, each line read as the CLI reads JSON: see
    :func:`cassini.files.read_jsonl` (this name is kept for the library's callers)."""
    from cassini import files

    return files.read_jsonl(path, source)


#: Bytes of link-layer header before the IP packet, by pcap link type: NULL and LOOP (BSD
#: loopback, 4 bytes of address family), Ethernet, raw IP (12, 101, 228), Linux cooked
#: (``tcpdump -i any``: SLL, 16 bytes; SLL2, 20 bytes).
LINK_HEADER_BYTES = {0: 4, 1: 14, 12: 0, 101: 0, 108: 4, 113: 16, 228: 0, 276: 20}
#: Ethertypes of an 802.1Q VLAN tag (0x8100), an 802.1ad service tag (0x88a8) and the
#: older QinQ tag (0x9100): 4 bytes each between an Ethernet header and its payload.
VLAN_ETHERTYPES = (0x8100, 0x88A8, 0x9100)
_VLAN_TAGS = {struct.pack("!H", t) for t in VLAN_ETHERTYPES}


def _ip_offset(link: int, data: bytes) -> int:
    """Where the IP packet starts in a frame of link type ``link``: after the link
    header (:data:`LINK_HEADER_BYTES`) and, on Ethernet and Linux cooked (SLL, whose
    header also ends in the ethertype), after every VLAN tag, stacked ones (QinQ) too
    (:data:`VLAN_ETHERTYPES`): a tagged frame had been skipped as not IPv4."""
    offset = LINK_HEADER_BYTES[link]
    if link in (1, 113):
        while data[offset - 2 : offset] in _VLAN_TAGS:
            offset += 4
    return offset


@contextlib.contextmanager
def _scapy_quiet() -> Iterator[None]:
    """scapy's own warnings held back while a capture is read ("Pcap: packet has been
    truncated" went to stderr beside the one line that names the problem)."""
    logger = logging.getLogger("scapy.runtime")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def pcap_packets(
    pcap: Path | str, src_ip: str, *, payload: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps (s) and sizes (bytes) of the IPv4 packets from ``src_ip`` in a capture,
    classic pcap (micro- or nanosecond) or pcapng (each interface with its own link type
    and time resolution), read by scapy's raw readers; the link types are those of
    :data:`LINK_HEADER_BYTES` (frames VLAN-tagged or not, see :func:`_ip_offset`):
    packets on another are skipped (a pcapng capture may hold other interfaces), and a
    capture with no packet from ``src_ip`` on a supported one is an InputError naming
    the other link type.  Sizes are IP total
    lengths (what the link carries, less its own header), or with ``payload`` what the
    application sent: the IP length less the IP header and the TCP header (its data
    offset) or UDP's 8 bytes, so a pure ACK counts 0.  Both are read from the headers,
    so a capture truncated by tcpdump's snap length still counts whole packets."""
    want = _ipv4_address(src_ip)
    from scapy.error import Scapy_Exception
    from scapy.utils import RawPcapReader

    from cassini import files

    files.check_nonempty(pcap)
    stamps, sizes = [], []
    unsupported = None  # the first link type not in LINK_HEADER_BYTES met
    try:
        reader = RawPcapReader(str(pcap))
    except OSError as e:
        raise InputError(str(pcap), f"cannot read: {e.strerror or e}") from None
    except Scapy_Exception as e:
        raise InputError(str(pcap), f"not a pcap capture ({e})") from None
    consumed = 24  # a classic capture's file header; each record adds 16 + caplen bytes
    with reader, _scapy_quiet():
        for data, meta in reader:
            caplen = getattr(meta, "caplen", len(data))
            if len(data) < caplen:
                raise InputError(
                    str(pcap), f"truncated capture: a packet holds {len(data)} of {caplen} bytes"
                )
            consumed += 16 + caplen
            link, stamp = _link_and_time(reader, meta, pcap)
            if link not in LINK_HEADER_BYTES:  # another interface's: refused if it is all
                unsupported = link if unsupported is None else unsupported
                continue
            ip = data[_ip_offset(link, data) :]
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[12:16] != want:
                continue
            stamps.append(stamp)
            size = struct.unpack("!H", ip[2:4])[0]
            if payload:
                size -= _transport_headers(ip)
            sizes.append(max(size, 0))
    if type(reader) is RawPcapReader and consumed != os.stat(pcap).st_size:
        raise InputError(str(pcap), "truncated capture: it ends inside a packet record")
    if not stamps and unsupported is not None:
        raise _unsupported_link(unsupported, pcap)
    if not stamps:
        raise InputError("src_ip", f"no IPv4 packets from {src_ip} in {pcap}")
    return np.asarray(stamps), np.asarray(sizes, float)


def _ipv4_address(src_ip: str) -> bytes:
    """The 4 bytes of a dotted-quad IPv4 address (``10.0.0`` or ``167772161``, which
    ``inet_aton`` takes, are refused naming ``src_ip``)."""
    try:
        return ipaddress.IPv4Address(src_ip).packed
    except ValueError:
        raise InputError(
            "src_ip", f"not an IPv4 address in dotted-quad form (a.b.c.d): {src_ip!r}"
        ) from None


def _link_and_time(reader: Any, meta: Any, pcap: Path | str) -> tuple[int, float]:
    """A packet's link type and timestamp (seconds): a classic capture's from its file
    header and record (``usec`` holds nanoseconds in a nanosecond capture), a pcapng
    packet's from its interface (link type, ``tsresol`` units per second) and its 64-bit
    timestamp."""
    if hasattr(meta, "tshigh"):  # pcapng
        if meta.tshigh is None:
            raise InputError(str(pcap), "a packet without a timestamp (a simple packet block)")
        return meta.linktype, ((meta.tshigh << 32) | meta.tslow) / meta.tsresol
    scale = 1e-9 if getattr(reader, "nano", False) else 1e-6
    return reader.linktype & 0xFFFF, meta.sec + meta.usec * scale  # upper bits: FCS length


def _unsupported_link(link: int, pcap: Path | str) -> InputError:
    """The refusal of a capture whose packets from the source are all on link type
    ``link``, one not in :data:`LINK_HEADER_BYTES` (its DLT name when scapy knows it)."""
    import scapy.data

    name = next(
        (k[4:] for k, v in vars(scapy.data).items() if k.startswith("DLT_") and v == link),
        "unknown",
    )
    return InputError(
        str(pcap),
        f"link type {link} ({name}) is not supported; capture with -i <interface> "
        "(Ethernet, Linux cooked, BSD loopback or raw IP)",
    )


def _transport_headers(ip: bytes) -> int:
    """Bytes of IP plus TCP/UDP headers at the front of an IPv4 packet (as captured)."""
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] == 6 and len(ip) >= ihl + 13:  # TCP: data offset in the 13th byte's high nibble
        return ihl + (ip[ihl + 12] >> 4) * 4
    if ip[9] == 17:
        return ihl + 8
    return ihl


def pcap_series(
    pcap: Path | str,
    src_ip: str,
    dt_s: float = 0.001,
    *,
    payload: bool = False,
    window_s: tuple[float, float] | None = None,
) -> tuple[np.ndarray, float]:
    """Bits per second sent by ``src_ip`` in each ``dt_s`` bin of a capture (IP lengths,
    or TCP/UDP payload with ``payload``; see :func:`pcap_packets`); returns the series and
    its start (seconds): the capture's first timestamp, or ``window_s``'s start
    (:func:`series_from_packets`)."""
    stamps, sizes = pcap_packets(pcap, src_ip, payload=payload)
    return series_from_packets(stamps, sizes, dt_s, window_s)


def capture_period(
    stamps_s: np.ndarray,
    sizes_bytes: np.ndarray,
    dt_s: float,
    window_s: tuple[float, float] | None = None,
) -> float:
    """The iteration time (seconds) of a capture's packets (:func:`estimate_period`), from
    bins of ``dt_s`` seconds or, when they are finer than twice the median spacing of the
    packets that carry bytes, of the least multiple of ``dt_s`` that is not: in bins
    finer than the packets the series is a comb whose teeth are the packets (at 20 us
    bins and a packet every 58 us the autocorrelation turned negative at lag 1 and the
    packet gap read as the iteration); in bins holding two packets or more a phase is
    one run again."""
    from cassini.profile import estimate_period

    dt_s = schema.number(dt_s, "dt_s", positive=True)
    sending = np.sort(np.asarray(stamps_s, float)[np.asarray(sizes_bytes, float) > 0])
    if window_s is not None:
        sending = sending[(sending >= window_s[0]) & (sending < window_s[1])]
    spacing = float(np.median(np.diff(sending))) if sending.size > 1 else 0.0
    bin_s = dt_s * max(1, math.ceil(2 * spacing / dt_s - 1e-9))
    series, _ = series_from_packets(stamps_s, sizes_bytes, bin_s, window_s)
    try:
        return estimate_period(series, bin_s)
    except InputError as e:
        if bin_s == dt_s:
            raise
        raise InputError(
            e.field,
            f"{e.problem} (read at {bin_s:g} s bins, twice the packets' median spacing "
            f"{spacing:g} s)",
        ) from None


def profile_from_pcap(
    job_id: str,
    pcap: Path | str,
    src_ip: str,
    dt_s: float = 0.001,
    origin_s: float | None = None,
    *,
    window_s: tuple[float, float] | None = None,
    iteration_starts_s: Sequence[float] | Mapping[int, float] | None = None,
    **kwargs: Any,
) -> JobProfile:
    """The job's profile as seen on the wire from one of its hosts: payload rates (bits/s
    the application sent, as the DDP hook's and the worker log's profiles count, not
    header bytes), phases from :meth:`JobProfile.from_samples` with the bytes conserved.

    ``window_s`` (wall clock, seconds; e.g. from the first measured iteration's start to
    the last's) keeps only the packets of the iterations: a capture also holds the
    process group's set-up, the model broadcast and idle time, which folded with the
    iterations would dilute every rate (a 15-iteration DDP job in a 2.5 s capture read as
    a third of its bytes).  See :func:`profile_from_series` for ``origin_s``.

    With ``iteration_starts_s`` (wall clock, seconds, e.g. from the job's own log) each
    iteration is folded from its own start (:func:`fold_by_iteration`): the window, the
    origin and the period all come from the starts, so ``window_s``, ``origin_s`` and
    ``iteration_time_s`` must not be given too."""
    kwargs.setdefault("conserve_bytes", True)
    if iteration_starts_s is None:
        stamps, sizes = pcap_packets(pcap, src_ip, payload=True)
        series, start = series_from_packets(stamps, sizes, dt_s, window_s)
        if kwargs.get("iteration_time_s") is None:
            kwargs["iteration_time_s"] = capture_period(stamps, sizes, dt_s, window_s)
        return profile_from_series(job_id, series, start, dt_s, origin_s, **kwargs)
    for name, value in (
        ("window_s", window_s),
        ("origin_s", origin_s),
        ("iteration_time_s", kwargs.pop("iteration_time_s", None)),
    ):
        if value is not None:
            raise InputError(name, "not with iteration_starts_s, which sets it")
    min_iterations = kwargs.pop("min_iterations", 2)
    if len(iteration_starts_s) - 1 < min_iterations:
        raise InputError(
            "iteration_starts_s",
            f"bound {len(iteration_starts_s) - 1} iterations, fewer than {min_iterations}",
        )
    stamps, sizes = pcap_packets(pcap, src_ip, payload=True)
    folded, period = fold_by_iteration(stamps, sizes, iteration_starts_s, dt_s)
    return JobProfile.from_folded(folded, period, job_id=job_id, **kwargs)
