"""What a training process uses: its flows tied to a job (``assign_port``) and the end of
each iteration marked for the kernel's exact mode (``mark_iteration``), through the pinned
maps or a descriptor a privileged parent passed down (``open_marks`` / ``use_marks_fd``).
No root needed to import it and no process started: each mark is two bpf(2) calls.
"""

from __future__ import annotations

import os
import zlib

from mltcp import layout
from mltcp.bpfmap import PinnedMap
from mltcp.pinned import MAPS, MltcpError, open_map

_marks: PinnedMap | None = None  # the marks map this process writes, opened once


def job_key(job_id: int | str) -> int:
    """The 32-bit id the kernel uses for a job (strings hash with CRC-32; never 0)."""
    if isinstance(job_id, int) and 0 < job_id < 2**32:
        return job_id
    return zlib.crc32(str(job_id).encode()) or 1


def assign_port(port: int, job_id: int | str) -> None:
    """Flows to or from ``port`` belong to ``job_id`` (exact mode)."""
    if not 0 < port < 65536:
        raise MltcpError(f"port must be in 1..65535, got {port}")
    with open_map("mltcp_ports") as m:
        m.update(layout.PORT.pack(port), layout.JOB.pack(job_key(job_id)))


def open_marks() -> int:
    """A new file descriptor of the pinned iteration-marks map, for a child process that
    cannot see ``/sys/fs/bpf`` (pass it with ``pass_fds``, then :func:`use_marks_fd`)."""
    m = open_map("mltcp_marks")
    os.set_inheritable(m.fd, True)
    return m.fd


def use_marks_fd(fd: int) -> None:
    """Mark iterations through an inherited descriptor of the marks map (see
    :func:`open_marks`) instead of opening the pin."""
    global _marks
    _marks = PinnedMap.from_fd(fd, *MAPS["mltcp_marks"])


def mark_iteration(job_id: int | str) -> int:
    """Tell the kernel that ``job_id`` finished an iteration; returns its new count."""
    global _marks
    if _marks is None:
        _marks = open_map("mltcp_marks")
    key = layout.JOB.pack(job_key(job_id))
    raw = _marks.lookup(key)
    count = (layout.MARK_COUNT.unpack(raw)[0] if raw else 0) + 1
    _marks.update(key, layout.MARK_COUNT.pack(count))
    return count
