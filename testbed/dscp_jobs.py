"""The ``prio`` fabric's marking for a run's jobs: each job's workers in a cgroup v2 whose
TCP sockets carry the DSCP of the job's priority class (a sock_ops program,
:class:`testbed.fabric.DscpMarker`), so sockets gloo opens on its own are marked too.
With MLTCP the job's MLTCP cgroup is marked instead (a process is in one cgroup)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from testbed.cgroups import cgroup2_root, remove_all
from testbed.fabric import DscpMarker

CGROUP_PREFIX = "testbed-prio-"


@contextlib.contextmanager
def job_classes(
    levels: Mapping[str, int],
    build_dir: Path,
    cgroups: Mapping[str, Path] | None = None,
) -> Iterator[dict[str, Path]]:
    """A cgroup per job (job id -> priority in ``levels``) whose sockets are marked with
    its priority's DSCP; ``cgroups`` reuses existing ones (MLTCP's).  Yields job id ->
    cgroup; the cgroups it made and the programs go on exit (processes left in them are
    killed, and each cgroup removed once they have exited:
    :func:`testbed.cgroups.remove_all`)."""
    marker = DscpMarker(build_dir)
    made: list[Path] = []
    with contextlib.ExitStack() as stack:
        paths: dict[str, Path] = dict(cgroups or {})
        try:
            if set(levels) - set(paths):
                root = stack.enter_context(cgroup2_root())
                for job in levels:
                    if job not in paths:
                        path = root / f"{CGROUP_PREFIX}{os.getpid()}-{job}"
                        path.mkdir(exist_ok=True)
                        made.append(path)
                        paths[job] = path
            for job, priority in levels.items():
                marker.attach(paths[job], priority)
            yield paths
        finally:
            try:
                marker.unload()
            finally:  # processes left killed; each cgroup goes once they have exited
                remove_all(made)


def join(path: Path, pid: int) -> None:
    """Move process ``pid`` into the cgroup ``path``."""
    (path / "cgroup.procs").write_text(str(pid))


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.dscp_jobs")
