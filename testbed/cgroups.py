"""The cgroups v2 a testbed run makes for its jobs' workers (``testbed-mltcp-<pid>-<job>``
for MLTCP's selection, ``testbed-prio-<pid>-<job>`` for the prio fabric's marking): where
cgroup v2 is mounted, and their removal.  A cgroup goes only once every process in it has
exited (``rmdir`` fails EBUSY until then, and a killed process takes a moment), so
:func:`remove` kills them and waits, bounded, before it gives up, saying so in one line,
and :func:`remove_all` does not let a second Ctrl-C cut that wait short;
:func:`remove_leftovers` is ``testbed cleanup``'s share."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from testbed import say_on_stderr

#: what names a run's cgroup: its kind, the run's pid, the job
NAME = re.compile(r"testbed-(mltcp|prio)-(\d+)-.+")
REMOVE_WAIT_S = 5.0  # how long remove() waits for the killed processes to exit (seconds)
POLL_S = 0.05  # between two tries (seconds)
RETRY = "`testbed cleanup` removes it"
DEFERRED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # held back by remove_all()


def cgroup2_mounts() -> list[Path]:
    """Where cgroup v2 is mounted on this host (``/proc/self/mounts``), first mount first."""
    mounts = [ln.split() for ln in Path("/proc/self/mounts").read_text().splitlines()]
    return [Path(m[1]) for m in mounts if len(m) > 2 and m[2] == "cgroup2"]


@contextlib.contextmanager
def cgroup2_root() -> Iterator[Path]:
    """The host's cgroup v2 mount (mounted on a temporary directory while the block runs
    when there is none)."""
    mounts = cgroup2_mounts()
    if mounts:
        yield mounts[0]
        return
    mounted = tempfile.mkdtemp(prefix="testbed-cg2-")
    subprocess.run(["mount", "-t", "cgroup2", "none", mounted], check=True)
    try:
        yield Path(mounted)
    finally:
        subprocess.run(["umount", mounted], check=False)
        os.rmdir(mounted)


def remove(
    path: Path,
    wait_s: float | None = None,
    say: Callable[[str], None] | None = None,
    retry: str = RETRY,
) -> bool:
    """Kill every process in the cgroup ``path`` and remove it, trying again until they
    have exited, for at most ``wait_s`` seconds (default :data:`REMOVE_WAIT_S`); True once
    it is gone.  Otherwise one line to ``say`` (default stderr) naming the cgroup and
    ``retry`` (what removes it later), and False."""
    wait_s = REMOVE_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    while True:
        for pid in _pids(path):
            _kill(pid)
        try:
            _rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            error = e
            if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                break
        time.sleep(POLL_S)
    waited = f" after {wait_s:g} s" if error.errno == errno.EBUSY else ""
    reason = f"{error.strerror or error}{waited}"
    (say or say_on_stderr)(f"testbed: cgroup {path} not removed ({reason}); {retry}")
    return False


def remove_all(paths: Iterable[Path], retry: str = RETRY) -> list[Path]:
    """:func:`remove` each of ``paths``; a signal that would stop the process (a second
    Ctrl-C, SIGTERM, SIGHUP) is held back until all are done, then delivered, so it does
    not cut this bounded wait short.  Returns those removed."""
    with interrupts_deferred():
        return [path for path in paths if remove(path, retry=retry)]


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back while the block runs (the first one that came
    is delivered to the handler it would have reached, after the block); only in the
    main thread, where Python runs signal handlers, and only those Python handles (not
    ignored ones)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    old = {sig: signal.getsignal(sig) for sig in DEFERRED}
    old = {sig: h for sig, h in old.items() if h not in (None, signal.SIG_IGN)}  # None: C's
    for sig in old:
        signal.signal(sig, lambda signum, _frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])


def leftovers(alive: Callable[[int], bool]) -> list[Path]:
    """Cgroups a testbed run made (:data:`NAME`) whose run is no longer ``alive``, under
    every cgroup v2 mount."""
    found = []
    for root in cgroup2_mounts():
        with contextlib.suppress(OSError):
            for path in sorted(root.iterdir()):
                m = NAME.fullmatch(path.name)
                if m and path.is_dir() and not alive(int(m.group(2))):
                    found.append(path)
    return found


def remove_leftovers(alive: Callable[[int], bool]) -> list[str]:
    """Remove the cgroups of runs no longer ``alive`` (their processes killed first; the
    programs attached to them go with them); what was removed, as ``cgroup PATH``."""
    again = "run `testbed cleanup` again once its processes have exited"
    return [f"cgroup {path}" for path in remove_all(leftovers(alive), retry=again)]


def _pids(path: Path) -> list[int]:
    """The processes in the cgroup ``path`` (none once it is gone)."""
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _rmdir(path: Path) -> None:
    os.rmdir(path)


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.cgroups")
