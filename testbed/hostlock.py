"""One exclusive lock for whatever must own this host while it runs: a testbed cluster
(its bridges, interfaces and ECN pins have fixed names) and the root tests that load
host-wide kernel state (MLTCP's congestion controls, the testbed).  ``fcntl.flock`` on
:data:`LOCK_PATH`: the kernel drops it when the holder dies, so a crashed run never
leaves it taken.

Re-entrant within a process, and inherited by child processes (through
:data:`HOLDER_ENV`), so a test that holds it can start a testbed run, in process or as a
subprocess, without waiting for itself.  Whoever has to wait says so, once, naming the
holder.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from testbed import say_on_stderr

LOCK_PATH = Path(os.environ.get("TESTBED_HOST_LOCK", "/run/testbed-host.lock"))
HOLDER_ENV = "TESTBED_HOST_LOCK_HOLDER"  # pid of the process holding it, for its children

_held: TextIO | None = None
_depth = 0


def _inherited() -> bool:
    """Whether an ancestor holds the lock (its pid in the environment, still alive)."""
    pid = os.environ.get(HOLDER_ENV, "")
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except OSError:
        return False
    return True


def acquire(who: str, say: Callable[[str], None] | None = None) -> None:
    """Take the host lock for ``who`` (words naming the holder), waiting as long as it
    takes; ``say`` (default: stderr) hears once that it waits and for whom."""
    global _held, _depth
    if _depth or _inherited():
        _depth += 1
        return
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    f = open(LOCK_PATH, "a+")  # noqa: SIM115 - held until release()
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        (say or say_on_stderr)(f"waiting for the host lock {LOCK_PATH} (held by {holder})")
        fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}: {who}\n")
    f.flush()
    _held, _depth = f, 1
    os.environ[HOLDER_ENV] = str(os.getpid())


def release() -> None:
    """Give back one :func:`acquire`; the lock itself goes with the last one."""
    global _held, _depth
    if _depth == 0:
        return
    _depth -= 1
    if _depth or _held is None:
        return
    _held.seek(0)
    _held.truncate()
    fcntl.flock(_held, fcntl.LOCK_UN)
    _held.close()
    _held = None
    if os.environ.get(HOLDER_ENV) == str(os.getpid()):
        del os.environ[HOLDER_ENV]


def held() -> bool:
    """Whether this process holds the lock (itself or through an ancestor)."""
    return _depth > 0


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.hostlock")
