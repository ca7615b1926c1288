"""What the requests of one app share (:class:`Service`): config, metrics, the registry
and the worker pool, with the two ways into the pool (:meth:`Service.compute`,
:meth:`Service.shifts`) and the cluster file's reload."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

import cassini
from cassini.errors import InputError
from cassini.service.audit import AuditEntry, AuditLog
from cassini.service.auth import RateLimiter, WriteGuard, read_token_file
from cassini.service.cluster import ClusterNetwork, load_cluster_file
from cassini.service.config import ServiceConfig
from cassini.service.drain import Drain
from cassini.service.errors import ComputeTimeout, InternalError, Overloaded, from_input_error
from cassini.service.metrics import Metrics, RequestRecord
from cassini.service.pool import PoolBusy, PoolTimeout, WorkerCrashed, WorkerPool, default_workers
from cassini.service.registry import Registry
from cassini.service.scoring import State
from cassini.service.shifts import JobShift
from cassini.service.store import Store
from cassini.service.tasks import ShiftsTask, Task
from cassini.service.tokenreview import TokenReviewer


class Service:
    """State shared by the requests of one app: config, metrics, registry, worker pool."""

    def __init__(self, config: ServiceConfig, log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.version = cassini.__version__
        self.metrics = Metrics()
        self._log = log or _stderr
        self.start_s = time.time()
        cluster, jobs = (
            load_cluster_file(config.cluster_file)
            if config.cluster_file
            else (ClusterNetwork(), [])
        )
        tokens = read_token_file(config.token_file) if config.token_file else None
        rate = config.write_rate_per_s
        limiter = RateLimiter(rate, max(1.0, 2 * rate))
        reviewer = None
        if config.token_review_url:
            reviewer = TokenReviewer(
                config.token_review_url,
                frozenset(config.token_review_users),
                config.token_review_own_token,
                config.token_review_ca,
            )
        self.guard = WriteGuard(tokens, config.insecure_writes, limiter, reviewer)
        self.store = Store(config.state_path, default_epoch_s=self.start_s)  # StateError
        self.registry = Registry(cluster, jobs, self.store, config.max_jobs)
        self.metrics.unusable_jobs.set_function(lambda: len(self.registry.unusable()))
        self._log_unusable()
        self.audit = AuditLog(config.audit_log, self.log)
        self.drain = Drain()
        self.pool: WorkerPool | None = None
        self._shifts: tuple[int, dict[str, JobShift]] | None = None
        self._shift_task: tuple[int, asyncio.Task] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.on_started: Callable[[], None] | None = None
        self.openapi: dict[str, Any] = {}  # the OpenAPI document, set by create_app
        self.kube: Any = None  # cassini.service.kube (--kube): started with the loop

    def log(self, line: str) -> None:
        self._log(line)

    def _log_unusable(self) -> None:
        for job_id, why in self.registry.unusable().items():
            self.log(f"cassini serve: job {job_id}: kept in the state file, not used: {why}")

    async def start(self) -> None:
        """Lifespan start: the worker pool, in the serving event loop."""
        self.loop = asyncio.get_running_loop()
        self.pool = WorkerPool(
            self.config.workers or default_workers(), on_restart=self.metrics.worker_restarts.inc
        )
        if self.config.kube is not None:
            from cassini.service.kube.service_hook import start_kube

            self.kube = start_kube(self)
        if self.on_started is not None:
            self.on_started()

    async def stop(self) -> None:
        if self.kube is not None:
            self.kube.stop()
        if self.pool is not None:
            self.pool.close()
        self.store.close()
        self.audit.close()

    def audit_write(self, scope: dict, record: RequestRecord) -> None:
        """Append an answered write to the audit log and count it."""
        client = (scope.get("client") or ("-", 0))[0]
        entry = AuditEntry(
            time.time(), client, record.token_name, scope["method"], scope.get("path", ""),
            record.job_id, record.status,
        )
        self.metrics.writes.labels(entry.outcome, str(record.status)).inc()
        self.audit.append(entry)

    def reload(self) -> bool:
        """Re-read the cluster file (SIGHUP); on error keep the current cluster and log."""
        path = self.config.cluster_file
        if path is None:
            self.log("cassini serve: SIGHUP: no --cluster file to reload")
            return False
        try:
            cluster, jobs = load_cluster_file(path)
        except InputError as e:
            self.metrics.reloads.labels("error").inc()
            self.log(f"cassini serve: SIGHUP: {e.in_file(path)}; keeping the previous cluster")
            return False
        self.registry.replace_file(cluster, jobs)
        self._log_unusable()
        self.metrics.reloads.labels("ok").inc()
        state = self.registry.state()
        self.log(
            f"cassini serve: reloaded {path}: {len(cluster.links)} links, "
            f"{len(cluster.nodes)} nodes, {len(state.jobs)} running jobs"
        )
        return True

    async def compute(self, deadline: float, task: Task, state: State | None = None) -> Any:
        """Run one task in the worker pool (``deadline``: :func:`time.monotonic`
        seconds); its answer, or a service error."""
        assert self.pool is not None
        limit = self.config.timeout_s
        try:
            reply = await self.pool.run(task, deadline, state)
        except PoolBusy:
            raise Overloaded(
                f"busy: no worker free within the {limit:g} s limit; retry later",
                headers={"Retry-After": "1"},
            ) from None
        except PoolTimeout:
            raise ComputeTimeout(
                f"computation took longer than the {limit:g} s limit and was stopped; try a "
                "coarser precision_deg or fewer candidates"
            ) from None
        except WorkerCrashed:
            raise InternalError("the worker process died while computing") from None
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "input":
            raise from_input_error(InputError(reply[1], reply[2]))
        self.log(f"cassini serve: internal error in a worker: {reply[1]}")
        self.log(reply[2].rstrip())
        raise InternalError(f"internal error: {reply[1]}")

    async def shifts(self, deadline: float) -> tuple[State, dict[str, JobShift]]:
        """The running jobs' computed time-shifts for the current state (computed once per
        state version, by one worker, whoever asks)."""
        state = self.registry.state()
        if self._shifts is not None and self._shifts[0] == state.version:
            return state, self._shifts[1]
        if self._shift_task is None or self._shift_task[0] != state.version:
            task = asyncio.ensure_future(
                self.compute(deadline, ShiftsTask(self.config.precision_deg), state)
            )
            self._shift_task = (state.version, task)
        task = self._shift_task[1]
        try:
            result = await asyncio.shield(task)
        finally:
            if task.done() and self._shift_task is not None and self._shift_task[1] is task:
                self._shift_task = None
        self._shifts = (state.version, result)
        return state, result


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
