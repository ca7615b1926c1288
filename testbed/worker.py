"""Synthetic training job worker: per iteration a compute phase (sleep, seconds) then a
ring all-reduce of ``bytes`` bytes over TCP among the job's workers.

Run inside a Mininet host: ``python -m testbed.worker SPEC.json`` (a
:class:`testbed.workerspec.WorkerSpec`).  Each iteration is written as one JSON line to
``spec.out``: ``{"iter", "start", "comm_start", "end",
"bytes_sent", "drift_s"}`` (wall-clock seconds; every namespace shares the clock).

A ring all-reduce over ``n`` workers runs ``2 (n - 1)`` steps; in each step every worker
sends ``bytes / n`` to the next worker and receives as much from the previous one, so each
worker sends ``2 (n - 1) / n * bytes`` per iteration.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable

from cassini.agent import GroupRelease, TimeShiftAgent
from testbed import internal_command_usage, releaseboard
from testbed.startgate import worker_ready
from testbed.workerspec import WorkerSpec

CONNECT_TIMEOUT_S = 30.0


def ring_sockets(
    rank: int, addrs: list[str], port: int, cc: str | None
) -> tuple[socket.socket, socket.socket]:
    """Connect rank -> rank+1 and accept rank-1 -> rank; returns (to_next, from_prev)."""
    n = len(addrs)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((addrs[rank], port))
    listener.listen(1)
    accepted: list[socket.socket] = []

    def accept() -> None:
        conn, _ = listener.accept()
        accepted.append(conn)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    deadline = time.time() + CONNECT_TIMEOUT_S
    while True:
        out = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if cc:
            out.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        out.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            out.connect((addrs[(rank + 1) % n], port))
            break
        except OSError:
            out.close()
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    acceptor.join(CONNECT_TIMEOUT_S)
    listener.close()
    if not accepted:
        raise TimeoutError("previous rank never connected")
    return out, accepted[0]


def recv_exact(sock: socket.socket, buf: memoryview) -> None:
    got = 0
    while got < len(buf):
        n = sock.recv_into(buf[got:])
        if n == 0:
            raise ConnectionError("peer closed the connection")
        got += n


def ring_allreduce(to_next: socket.socket, from_prev: socket.socket, n: int, nbytes: int) -> int:
    """Move the bytes of a ring all-reduce (no arithmetic: the network is what we study).
    Returns the bytes this worker sent."""
    chunk = max(1, nbytes // n)
    payload = bytes(chunk)
    inbox = memoryview(bytearray(chunk))
    sent = 0
    for _ in range(2 * (n - 1)):
        sender = threading.Thread(target=to_next.sendall, args=(payload,))
        sender.start()
        recv_exact(from_prev, inbox)
        sender.join()
        sent += chunk
    return sent


def barrier(to_next: socket.socket, from_prev: socket.socket, n: int) -> None:
    """Pass a token twice around the ring: afterwards every worker is connected."""
    one = memoryview(bytearray(1))
    for _ in range(2):
        for _ in range(n - 1):
            to_next.sendall(b"b")
            recv_exact(from_prev, one)


def run(spec: WorkerSpec) -> None:
    rank, addrs = spec.rank, list(spec.addrs)
    n = len(addrs)
    to_next, from_prev = ring_sockets(rank, addrs, spec.port, spec.cc)
    barrier(to_next, from_prev, n)
    if spec.warmup and n > 1:
        ring_allreduce(to_next, from_prev, n, spec.bytes)  # open the windows, untimed
    rng = random.Random(spec.seed * 1000 + rank)
    jitter = spec.jitter
    epoch = worker_ready(spec)  # every job's workers start from one epoch
    agent = None
    if spec.period_s:
        offset = spec.clock_offset_s  # an injected clock error (seconds)
        agent = TimeShiftAgent(
            spec.shift_s,
            spec.period_s,
            epoch,
            slip_tolerance_s=spec.tolerance_s,
            clock=lambda: time.time() + offset,
        )
    else:
        wait = epoch + spec.shift_s - time.time()
        if wait > 0:
            time.sleep(wait)
    group = _group_release(spec)
    marker = _iteration_marker(spec)
    with open(spec.out, "w", buffering=1) as out:
        for k in range(spec.iterations):
            if agent and group and not agent.released:  # a partner released, or by hand
                group[0].check(agent, group[1].released())
            drift = _agent_wait(agent, rank, n, to_next, from_prev) if agent else 0.0
            if agent and group and group[0].report_due(agent):
                group[1].report(agent.release_reason or "released")
            start = time.time()
            compute = spec.compute_s * (1 + rng.uniform(-jitter, jitter))
            time.sleep(max(0.0, compute))
            comm_start = time.time()
            sent = ring_allreduce(to_next, from_prev, n, spec.bytes) if n > 1 else 0
            end = time.time()
            if marker:
                marker()
            record = {
                "iter": k,
                "start": start,
                "comm_start": comm_start,
                "end": end,
                "bytes_sent": sent,
                "drift_s": drift,
            }
            if agent:
                record["realignments"] = agent.realignments
                record["released"] = agent.released
            if n > 1:
                record["tcp"] = tcp_state(to_next)
            out.write(json.dumps(record) + "\n")
    to_next.close()
    from_prev.close()


TCP_INFO_RTO_OFFSET = 240  # tcpi_total_rto (u16), tcpi_total_rto_recoveries, _time (u32)


def tcp_state(sock: socket.socket) -> dict[str, int]:
    """The sending socket's congestion state after an iteration (struct tcp_info):
    ca_state (0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss), cwnd and ssthresh in
    segments, smoothed RTT in microseconds, retransmitted segments in total, and where
    the kernel reports them (Linux 6.7 and later) the retransmission timeouts in total
    and the milliseconds spent recovering from them in total."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    ca_state = raw[1]
    rtt_us, _, ssthresh, cwnd = struct.unpack_from("<4I", raw, 68)
    (total_retrans,) = struct.unpack_from("<I", raw, 100)
    state = {
        "ca_state": ca_state,
        "cwnd": cwnd,
        "ssthresh": ssthresh,
        "rtt_us": rtt_us,
        "total_retrans": total_retrans,
    }
    if len(raw) >= TCP_INFO_RTO_OFFSET + 8:
        total_rto, _, rto_ms = struct.unpack_from("<HHI", raw, TCP_INFO_RTO_OFFSET)
        state |= {"total_rto": total_rto, "total_rto_time_ms": rto_ms}
    return state


def _group_release(spec: WorkerSpec) -> tuple[GroupRelease, releaseboard.Board] | None:
    """The planner rank's part in its group's release (None: no board, or not rank 0)."""
    if not spec.period_s or not spec.release_board or spec.rank != 0:
        return None
    board = releaseboard.Board(spec.release_board, spec.job_id, spec.partners)
    return GroupRelease(spec.job_id, board.partners), board


def _agent_wait(
    agent: TimeShiftAgent, rank: int, n: int, to_next: socket.socket, from_prev: socket.socket
) -> float:
    """Rank 0 plans the slot and its decision travels down the ring, so every worker of the
    job takes the same one (re-alignments and release included)."""

    def ring_broadcast(values: tuple[float, ...] | None) -> tuple[float, ...]:
        size = struct.calcsize("!4d")
        if rank > 0:
            buf = memoryview(bytearray(size))
            recv_exact(from_prev, buf)
            values = struct.unpack("!4d", buf)
        if rank < n - 1:
            to_next.sendall(struct.pack("!4d", *values))
        return values

    return agent.step(rank == 0, ring_broadcast if n > 1 else None)


def _iteration_marker(spec: WorkerSpec) -> Callable[[], None] | None:
    """In MLTCP's exact mode, tell the kernel where each iteration ends."""
    if not spec.mltcp_job:
        return None
    import mltcp  # noqa: PLC0415 - only in MLTCP runs

    job = spec.mltcp_job
    if spec.mltcp_marks_fd is not None:  # a Mininet host has its own /sys
        from mltcp import marks

        marks.use_marks_fd(spec.mltcp_marks_fd)
    return lambda: mltcp.mark_iteration(job)


USAGE = "python -m testbed.worker SPEC_JSON"
ABOUT = (
    "One rank of a synthetic testbed job, from its spec (a testbed.workerspec.WorkerSpec\n"
    "JSON file).  An internal command: `testbed run` starts it inside the emulated\n"
    "cluster's hosts.  To run jobs, write a config and run `testbed run CONFIG`\n"
    "(testbed run --help)."
)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    internal_command_usage(argv, USAGE, ABOUT)
    run(WorkerSpec.load(argv[0]))


if __name__ == "__main__":
    main()
