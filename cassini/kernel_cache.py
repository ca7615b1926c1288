"""Keeps numba's on-disk cache of our compiled kernels in step with their sources.

numba (``cache=True``) keys a cached kernel on the modification time and size of the
file that defines it, and on nothing else: a kernel that calls a kernel of another file,
or reads a constant imported from one (``mltcp.policy.ONE``), keeps its cached machine
code when only that other file changes.  After ``git pull`` had changed
``flowstep.py`` alone, ``jitloop.run_events`` would still run the old step: the
simulator's results silently wrong until the cache was deleted by hand.

:data:`KERNEL_SOURCES` lists every file that defines a kernel and every project module
those files import (``tests/test_kernel_cache.py`` holds the list to the code).  The
first import of a kernel module calls :func:`ensure_fresh`, which digests them all and,
where the digest differs from the one stamped in a kernel folder's ``__pycache__``,
deletes that folder's numba cache files (``*.nbi``, ``*.nbc``) and stamps the new
digest: every kernel compiles again once (the warm-up, ``python -m
cassini.sim.jit_warmup``, takes about 100 s on two cores).  Without numba, or where
``__pycache__`` is not writable (numba then caches under the user's cache folder, where
a new install changes every file's time anyway), nothing is done.

Limits: a process that imported the kernels before an edit and compiles a caller after it
writes its old code under the new stamp (restart long-running processes after editing a
kernel); and a cache under ``NUMBA_CACHE_DIR`` is not checked (numba keeps it there, not
in ``__pycache__``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
#: The files whose change makes cached kernels stale, relative to the repository root:
#: the kernel files first, then the project modules they import.
KERNEL_SOURCES: tuple[str, ...] = (
    "cassini/circle_compiled.py",
    "cassini/priority.py",
    "cassini/sim/network/rates.py",
    "cassini/sim/network/flowsolve.py",
    "cassini/sim/network/flowstep.py",
    "cassini/sim/network/jitloop.py",
    "cassini/sim/network/flows.py",
    "cassini/sim/parts/sharing.py",
    "mltcp/policy.py",
)
KERNEL_FILES = KERNEL_SOURCES[:6]
STAMP_NAME = "cassini-kernels.sha256"
CACHE_SUFFIXES = (".nbi", ".nbc")
_checked = False


def sources_digest(root: Path, files: Sequence[str]) -> str:
    """SHA-256 (hex) over the files' names and contents, in the given order."""
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0")
        digest.update((root / name).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def refresh_cache_dirs(cache_dirs: Iterable[Path], digest: str) -> list[Path]:
    """In each folder whose stamp is not ``digest``: delete the numba cache files and
    write the stamp (a missing folder is made first, so that the kernels numba caches
    there next are stamped).  Returns the files deleted.  A folder that cannot be written
    is left as it is."""
    removed: list[Path] = []
    for folder in cache_dirs:
        stamp = folder / STAMP_NAME
        if _read(stamp) == digest:
            continue
        try:
            folder.mkdir(exist_ok=True)
            for path in sorted(folder.iterdir()):
                if path.suffix in CACHE_SUFFIXES:
                    path.unlink(missing_ok=True)
                    removed.append(path)
            partial = folder / f".{STAMP_NAME}.{os.getpid()}"
            partial.write_text(digest + "\n")
            os.replace(partial, stamp)  # atomic: a concurrent reader sees old or new
        except OSError:
            continue
    return removed


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def ensure_fresh() -> list[Path]:
    """Once per process: drop our kernels' cached code if any of :data:`KERNEL_SOURCES`
    changed since it was cached.  Returns the files deleted (empty on later calls)."""
    global _checked
    if _checked:
        return []
    _checked = True
    try:
        digest = sources_digest(PACKAGE_ROOT, KERNEL_SOURCES)
    except OSError:  # an install without some of the sources: nothing to compare
        return []
    folders = {(PACKAGE_ROOT / name).parent / "__pycache__" for name in KERNEL_FILES}
    return refresh_cache_dirs(sorted(folders), digest)
