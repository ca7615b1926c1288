"""One scheme's jobs on a freshly built emulated cluster.  :class:`Session` is a context
manager: entering brings the cluster up (and, for MLTCP, the jobs' cgroups; for a
profile, the capture), :meth:`~Session.spawn` starts every rank's worker,
:meth:`~Session.release` lets them all start from one epoch, :meth:`~Session.wait` waits
and reads the link counters; leaving always tears everything down, and
:meth:`~Session.collect` turns the logs into the scheme's typed result.
:func:`run_together` is that sequence.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cassini.measure import iteration_times
from mltcp import variants
from mltcp.policy import MltcpOptions
from testbed import dscp_jobs, mltcp_jobs, say_on_stderr, startgate
from testbed.capture import Capture
from testbed.host import AVAILABLE_CC
from testbed.iterations import off_slot, read_log
from testbed.net import EmulatedCluster, TestbedError
from testbed.releaseboard import board_for
from testbed.results import JobResult, SchemeResult
from testbed.run.config import WORKER_MODULES, RunConfig, SchemeSpec, TestbedJob
from testbed.run.config import estimated_period_s as _estimated_period
from testbed.run.report import Progress, wait_with_progress
from testbed.workerspec import WorkerSpec

BASE_PORT = 6000  # job k's ring or rendezvous listens on BASE_PORT + k


@dataclass(frozen=True)
class Schedule:
    """When each job starts: ``offsets_s`` (seconds after the common epoch) and, for the
    jobs the time-shift agent holds, their ``periods_s`` and slip ``tolerances_s`` (a held
    job re-aligns once it runs later than its tolerance; default 5 % of its period)."""

    offsets_s: Mapping[str, float]
    periods_s: Mapping[str, float] = field(default_factory=dict)
    tolerances_s: Mapping[str, float] = field(default_factory=dict)

    def held(self, job_id: str) -> bool:
        return job_id in self.periods_s


def available_congestion_controls() -> tuple[str, ...]:
    """The congestion controls this kernel has now
    (``/proc/sys/net/ipv4/tcp_available_congestion_control``)."""
    return tuple(AVAILABLE_CC.read_text().split())


MLTCP_LEFT_LOADED = "mltcp: loaded for this run and left loaded; `mltcp unload` removes it"


def ensure_cc(cc: str, say: Progress | None = None) -> bool:
    """Load our BPF congestion controls on demand (MLTCP variants, dctcp_bpf); a
    TestbedError for any other control the kernel lacks.  True when it loaded them now:
    they stay loaded after the run, and ``say`` (default stderr) hears so, once, in
    :data:`MLTCP_LEFT_LOADED`."""
    available = available_congestion_controls()
    if cc in available:
        return False
    if variants.by_cc(cc) is not None:
        from mltcp import admin
        from mltcp.pinned import MltcpError

        try:
            admin.load(variant="all")
        except MltcpError as e:  # e.g. not root: the testbed's one-line error
            raise TestbedError(f"congestion control {cc!r}: {e}") from None
        (say or say_on_stderr)(MLTCP_LEFT_LOADED)
        return True
    raise TestbedError(f"congestion control {cc!r} is not available (have {' '.join(available)})")


def worker_spec(
    cfg: RunConfig,
    job: TestbedJob,
    index: int,
    rank: int,
    schedule: Schedule,
    log: Path,
    gate: Path,
) -> WorkerSpec:
    """Rank ``rank`` of ``job`` (the config's ``index``-th), logging to ``log``, starting
    from the epoch in the go file ``gate``."""
    offset = schedule.offsets_s.get(job.job_id, 0.0)
    spec = WorkerSpec(
        job_id=job.job_id,
        rank=rank,
        world_size=len(job.hosts),
        iterations=job.iterations,
        out=str(log),
        kind=job.kind,
        addrs=tuple(cfg.topology.ip(h) for h in job.hosts),
        port=BASE_PORT + index,
        iface=f"{job.hosts[rank]}-eth0",
        compute_s=job.compute_s,
        bytes=job.bytes,
        jitter=job.jitter,
        seed=cfg.seed + index,
        width=job.width,
        layers=job.layers,
        batch=job.batch,
        shift_s=offset,
        clock_offset_s=job.clock_offset_s,
        start_gate=str(gate),
    )
    if job.kind == "model":
        spec = replace(
            spec,
            model=job.model,
            compute=job.compute,
            calibration=str(Path(job.calibration).resolve()),
            scale=job.scale,
        )
    if schedule.held(job.job_id):
        period = schedule.periods_s[job.job_id]
        tolerance = schedule.tolerances_s.get(job.job_id)
        partners = tuple(sorted(j for j in schedule.periods_s if j != job.job_id))
        spec = replace(
            spec,
            period_s=period,
            shift_s=offset % period,
            tolerance_s=tolerance,
            release_board=str(board_for(gate)),
            partners=partners,
        )
    return spec


class Session:
    """``cfg``'s jobs on one freshly built cluster under congestion control ``cc`` (see
    the module docstring); logs and worker output in ``logs_dir``."""

    def __init__(
        self,
        cfg: RunConfig,
        scheme: SchemeSpec,
        cc: str,
        logs_dir: Path,
        mltcp: MltcpOptions | None = None,
        capture: Path | None = None,
    ) -> None:
        self.cfg, self.scheme, self.cc, self.logs_dir = cfg, scheme, cc, logs_dir
        self.mltcp, self.capture = mltcp, capture
        self.logs = {
            j.job_id: tuple(logs_dir / f"{j.job_id}-rank{r}.jsonl" for r in range(len(j.hosts)))
            for j in cfg.jobs
        }
        self.gate = logs_dir / "go.json"
        self.cluster: EmulatedCluster | None = None
        self.procs: list[subprocess.Popen] = []
        self.tags: dict[str, str] = {}  # job -> its run-unique MLTCP job name
        self.cgroups: dict[str, Path] = {}  # job -> its cgroup (MLTCP, prio marking)
        self.levels: dict[str, int] = {}  # job -> its prio fabric class (0 highest)
        self.marks_fd: int | None = None
        self.codes: list[int] = []
        self.link_bytes: dict[str, int] = {}
        self.ecn_marks: dict[str, int] = {}
        self.flows: dict[str, list[dict[str, Any]]] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Session:
        ensure_cc(self.cc)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        # leftovers of an earlier run in this directory: its ready files would release
        # this run early, its logs would show its final counts as this run's progress
        # (a worker writes its log only from its first iteration on)
        for paths in self.logs.values():
            for path in paths:
                Path(str(path) + startgate.READY_SUFFIX).unlink(missing_ok=True)
                path.unlink(missing_ok=True)
        board = board_for(self.gate)  # an earlier run's releases must not release this one
        for job in self.cfg.jobs:
            (board / job.job_id).unlink(missing_ok=True)
        try:
            self._bring_up()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _bring_up(self) -> None:
        stack, cfg = self._stack, self.cfg
        sources = [j.hosts for j in cfg.jobs]
        self.cluster = stack.enter_context(EmulatedCluster(cfg.topology, sources, cc=self.cc))
        if self.mltcp is not None:  # each job's sockets tied to it, however they are opened
            m = self.mltcp
            run_id = f"{os.getpid()}.{time.time():.3f}"
            self.tags = {j.job_id: f"{j.job_id}@{run_id}" for j in cfg.jobs}
            self.cgroups = stack.enter_context(mltcp_jobs.job_cgroups(self.cc, self.tags, m))
            if m.mode == "exact":
                self.marks_fd = mltcp_jobs.marks_fd()
                stack.callback(os.close, self.marks_fd)
        if cfg.topology.fabric.regime.marks_dscp:  # each job's sockets carry its class
            from testbed.run.priorities import job_levels

            self.levels = job_levels(cfg)
            self.cgroups = stack.enter_context(
                dscp_jobs.job_classes(self.levels, self.cluster.build_dir, self.cgroups)
            )
        if self.capture is not None:
            stack.enter_context(Capture(self.cluster, cfg.jobs[0].hosts[0], self.capture))

    def spawn(self, schedule: Schedule) -> None:
        """Start every rank's worker in its host (and, for MLTCP, in its job's cgroup)."""
        assert self.cluster is not None, "spawn inside the session's with block"
        stack = self._stack
        for k, job in enumerate(self.cfg.jobs):
            for rank, host in enumerate(job.hosts):
                log = self.logs[job.job_id][rank]
                spec = worker_spec(self.cfg, job, k, rank, schedule, log, self.gate)
                if self.marks_fd is not None:  # exact mode: workers mark every iteration
                    # the descriptor is inherited: hosts have their own /sys
                    spec = replace(
                        spec, mltcp_job=self.tags[job.job_id], mltcp_marks_fd=self.marks_fd
                    )
                spec_path = log.with_suffix(".spec.json")
                spec.dump(spec_path)
                # the worker's own output goes to a file next to its log: a pipe nobody
                # reads would block it once full; the session's exit closes it
                out_path = log.with_suffix(".out")
                output = stack.enter_context(open(out_path, "w"))  # noqa: SIM115
                argv = [sys.executable, "-m", WORKER_MODULES[job.kind], str(spec_path)]
                fds = (spec.mltcp_marks_fd,) if spec.mltcp_marks_fd else ()
                proc = self.cluster.popen(
                    host, argv, pass_fds=fds, stdout=output, stderr=subprocess.STDOUT
                )
                self.procs.append(proc)
                if self.cgroups:  # from here, before it opens a socket (imports take seconds)
                    dscp_jobs.join(self.cgroups[job.job_id], proc.pid)

    def release(self) -> None:
        """Once every worker is ready, write the go file with the common epoch; a worker
        that died or never got ready fails the scheme."""
        every_log = [path for paths in self.logs.values() for path in paths]
        self.gate.unlink(missing_ok=True)
        start_timeout = 120 + 60 * sum(j.kind != "synthetic" for j in self.cfg.jobs)
        died = lambda: any(p.poll() is not None for p in self.procs)  # noqa: E731
        if startgate.release_when_ready(every_log, self.gate, start_timeout, died) is None:
            for p in self.procs:
                p.kill()
            raise TestbedError(
                f"{self.scheme.name}: workers not ready after {start_timeout} s or one died; "
                f"worker output (*.out) in {self.logs_dir}"
            )

    def wait(self, schedule: Schedule, progress: Progress | None = None) -> None:
        """Wait for the workers (a generous time-out from the jobs' estimated periods);
        the bytes each fabric link direction carried meanwhile, its ECN marks, and the
        flows MLTCP tied to each job."""
        assert self.cluster is not None, "wait inside the session's with block"
        cfg = self.cfg
        slow_start = 2.0 * any(j.kind != "synthetic" for j in cfg.jobs)
        longest = max(
            (j.iterations + 2) * _estimated_period(cfg, j) + schedule.offsets_s.get(j.job_id, 0.0)
            for j in cfg.jobs
        )
        timeout = 60 + slow_start * 10 + 4 * longest
        fabric_dirs = [d for link in cfg.topology.bottlenecks() for d in link.directions()]
        # counted from here: the workers' connection set-up and warm-up are behind them
        before = self.cluster.tx_bytes(fabric_dirs)
        rank0 = {j: paths[0] for j, paths in self.logs.items()}
        total = {j.job_id: j.iterations for j in cfg.jobs}
        self.codes = wait_with_progress(self.procs, rank0, total, timeout, progress)
        after = self.cluster.tx_bytes(fabric_dirs)
        self.link_bytes = {d: after[d] - before.get(d, 0) for d in after}
        self.ecn_marks = self.cluster.ecn_marks() or {}
        self.flows = mltcp_jobs.jobs_flows(self.tags)

    def collect(self, schedule: Schedule) -> SchemeResult:
        """The scheme's result from the workers' logs (after the session is left); a
        worker that failed fails the scheme."""
        failed = [c for c in self.codes if c != 0]
        if failed:
            raise TestbedError(
                f"{self.scheme.name}: {len(failed)} worker(s) failed (exit codes {failed}); "
                f"logs and worker output (*.out) in {self.logs_dir}"
            )
        jobs = {job.job_id: self._job_result(job, schedule) for job in self.cfg.jobs}
        mode = self.scheme.mltcp.mode
        return SchemeResult(
            name=self.scheme.name,
            kind=self.scheme.kind,
            cc=self.cc,
            fabric=self.cfg.topology.fabric.kind,
            jobs=jobs,
            link_bytes=self.link_bytes,
            ecn_marks=self.ecn_marks,
            mltcp_flows={
                j: {"mode": mode, "steps": marked_steps(self.cfg, j), "flows": f}
                for j, f in self.flows.items()
            },
        )

    def _job_result(self, job: TestbedJob, schedule: Schedule) -> JobResult:
        logs = self.logs[job.job_id]
        records = read_log(logs[0])
        sent = sum(r["bytes_sent"] for path in logs for r in read_log(path))
        held = schedule.held(job.job_id)
        return JobResult(
            job_id=job.job_id,
            iteration_times_s=tuple(iteration_times(records)),
            bytes=sent,
            logs=logs,
            start_offset_s=schedule.offsets_s.get(job.job_id, 0.0),
            comm_times_s=tuple(r["end"] - r["comm_start"] for r in records),
            realignments=records[-1].get("realignments", 0) if held else None,
            released=records[-1].get("released", False) if held else None,
            period_s=schedule.periods_s[job.job_id] if held else None,
            tolerance_s=schedule.tolerances_s.get(job.job_id) if held else None,
            off_slot=off_slot(records, schedule.tolerances_s.get(job.job_id)) if held else (),
        )


def marked_steps(cfg: RunConfig, job_id: str) -> int:
    """Iteration ends a job's workers mark in MLTCP's exact mode: every optimizer step of
    a DDP job (its two warm-up steps included), every timed iteration of a synthetic one."""
    job = next(j for j in cfg.jobs if j.job_id == job_id)
    return job.iterations + (2 if job.kind != "synthetic" else 0)


def run_together(
    cfg: RunConfig,
    scheme: SchemeSpec,
    cc: str,
    logs_dir: Path,
    schedule: Schedule,
    progress: Progress | None = None,
    mltcp: MltcpOptions | None = None,
    capture: Path | None = None,
) -> SchemeResult:
    """All of ``cfg``'s jobs on one freshly built cluster, started by ``schedule``."""
    with Session(cfg, scheme, cc, logs_dir, mltcp, capture) as session:
        session.spawn(schedule)
        session.release()
        session.wait(schedule, progress)
    return session.collect(schedule)


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.run.session")
