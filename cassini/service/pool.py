"""Worker processes of ``cassini serve``: the computations run here, not in the HTTP
process, so that one running past its time limit can be killed (no HTTP framework can stop
a computation in a thread) and a crash costs one request, not the service.

The pool is asyncio-native: a request awaits a free worker and then its answer, both
bounded by one deadline.  A worker keeps a copy of the cluster state; the pool sends a new
copy only when the state's version changed since that worker last saw it.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

from cassini.errors import InputError


def default_workers() -> int:
    """Worker processes by default: min(4, CPUs)."""
    return max(1, min(4, os.cpu_count() or 1))


# -- in the worker process ------------------------------------------------------------------

_PREPARED: Any = None  # scoring.Prepared of the last state received


def _worker_main(conn: Any) -> None:
    global _PREPARED
    # Ctrl-C in a terminal (or a service manager's SIGTERM) reaches the whole process
    # group; the parent lets requests in flight finish, then stops its workers itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from cassini.circle import allow_compiled
    from cassini.service.scoring import Prepared

    allow_compiled(False)  # numba's ~1 s import would fall in a fresh worker's first request

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        if message[0] == "state":
            _PREPARED = Prepared(message[1])
            continue
        try:
            reply: tuple = ("ok", message[1].run(_PREPARED))
        except InputError as e:
            reply = ("input", e.field, e.problem)
        except RecursionError:
            reply = ("input", "body", "nested too deeply")
        except MemoryError as e:  # e.g. iteration times whose common period is astronomical
            reply = ("input", "body", f"too large to compute ({e}); check the iteration times")
        except Exception as e:  # reported to the client as a 500, logged by the parent
            reply = ("error", f"{type(e).__name__}: {e}", traceback.format_exc())
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


# -- in the HTTP process --------------------------------------------------------------------


class PoolTimeout(Exception):
    """The computation ran past its deadline; its worker was killed."""


class PoolBusy(Exception):
    """No worker became free before the deadline."""


class WorkerCrashed(Exception):
    """The worker process died while computing."""


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self.proc: Any = None
        self.conn: Any = None
        self.version: int | None = None  # version of the state this worker holds

    def ensure_started(self) -> bool:
        """Start the process if it is not running; True if it had died or been killed."""
        if self.proc is not None and self.proc.is_alive():
            return False
        died = self.proc is not None
        self.kill()
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker_main, args=(child,), name="cassini-serve-worker", daemon=True
        )
        proc.start()
        child.close()
        self.proc, self.conn, self.version = proc, parent, None
        return died

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None
        self.version = None

    def stop(self, grace_s: float = 2.0) -> None:
        if self.proc is not None and self.proc.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.proc.join(grace_s)
        self.kill()


class WorkerPool:
    """``n`` long-lived worker processes; a request holds one while it computes.

    :meth:`run` waits at most until its deadline in all: for a free worker (else
    :class:`PoolBusy`) and then for the answer (else :class:`PoolTimeout`; the worker is
    killed and a fresh one is started before it is used again).  Create it inside the
    event loop that calls :meth:`run`.
    """

    def __init__(self, n: int, *, on_restart: Callable[[], None] | None = None) -> None:
        if n < 1:
            raise ValueError(f"workers must be >= 1, got {n}")
        methods = multiprocessing.get_all_start_methods()
        method = "forkserver" if "forkserver" in methods else "spawn"
        ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            # workers fork from a server that has imported the advisor once
            ctx.set_forkserver_preload(
                ["cassini.service.pool", "cassini.service.tasks", "cassini.service.scoring"]
            )
        self.start_method = method
        self._on_restart = on_restart
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._all = [_Worker(ctx) for _ in range(n)]
        for w in self._all:
            w.ensure_started()
            self._idle.put_nowait(w)

    @property
    def size(self) -> int:
        return len(self._all)

    def pids(self) -> list[int]:
        """Process ids of the running workers (tests kill one)."""
        return [w.pid for w in self._all if w.pid is not None]

    async def run(self, task: Any, deadline: float, state: Any = None) -> tuple:
        """Send ``task`` (a :mod:`cassini.service.tasks` object) to a free worker, first
        the cluster ``state`` if that worker holds another version; its reply tuple (see
        :func:`_worker_main`).
        ``deadline`` is a :func:`time.monotonic` time."""
        try:
            worker = await asyncio.wait_for(self._idle.get(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise PoolBusy from None
        try:
            if worker.ensure_started() and self._on_restart:
                self._on_restart()
            if deadline - time.monotonic() <= 0:
                raise PoolBusy
            try:
                if state is not None and worker.version != state.version:
                    await asyncio.to_thread(worker.conn.send, ("state", state))
                    worker.version = state.version
                worker.conn.send(("task", task))
                if not await _readable(worker.conn, deadline - time.monotonic()):
                    self._replace(worker)
                    raise PoolTimeout
                return worker.conn.recv()
            except (EOFError, OSError):
                self._replace(worker)
                raise WorkerCrashed from None
        except asyncio.CancelledError:
            # the request was cancelled mid-computation (shutdown): the worker's pipe may
            # hold a half-read task or an unread answer, so it cannot be reused
            self._replace(worker)
            raise
        finally:
            self._idle.put_nowait(worker)

    def _replace(self, worker: _Worker) -> None:
        """Kill a worker; it restarts when next taken from the idle queue."""
        worker.kill()
        if self._on_restart:
            self._on_restart()

    def close(self) -> None:
        for w in self._all:
            w.stop()


async def _readable(conn: Any, timeout_s: float) -> bool:
    """Wait until the pipe has data (or is closed); False after ``timeout_s``."""
    if timeout_s <= 0:
        return conn.poll(0)
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    fd = conn.fileno()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(True))
    try:
        await asyncio.wait_for(ready, timeout_s)
        return True
    except TimeoutError:
        return conn.poll(0)
    finally:
        loop.remove_reader(fd)
        # some event loops (uvloop) leave the descriptor non-blocking, and the pipe's
        # recv()/send() of a large message would then fail half-way
        os.set_blocking(fd, True)
