"""MLTCP for a testbed run's jobs: each job's workers in a cgroup v2 whose TCP sockets get
the MLTCP congestion control and are tied to the job (``mltcp select --cgroup --job``),
so sockets PyTorch's gloo opens on its own are caught; the iteration mode set for the run
(``idle``: gap detection, ``exact``: the workers mark every optimizer step); afterwards
each job's flows and the iterations the kernel counted on them.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from mltcp.policy import MltcpOptions
from testbed import cgroups
from testbed.cgroups import cgroup2_root

CGROUP_PREFIX = "testbed-mltcp-"


@contextlib.contextmanager
def job_cgroups(
    cc: str, tags: Mapping[str, str], options: MltcpOptions
) -> Iterator[dict[str, Path]]:
    """A cgroup per job (``tags``: job id -> the run-unique MLTCP job name), ``cc``
    selected for each, and the run's MLTCP ``options`` (its iteration mode, and the rule's
    fields it sets) over the loaded parameters; all undone on exit: the processes left in
    the cgroups are killed and the cgroups removed once they have exited (a line on stderr
    names one that is not, :func:`testbed.cgroups.remove_all`), and MLTCP's loader state
    forgets them (``mltcp status`` then has nothing to say about them)."""
    from mltcp import admin

    with cgroup2_root() as root:
        before = admin.get_params()
        paths: dict[str, Path] = {}
        try:
            admin.set_params(options.over(before))
            for job, tag in tags.items():
                path = root / f"{CGROUP_PREFIX}{os.getpid()}-{job}"
                path.mkdir(exist_ok=True)
                paths[job] = path
                admin.select(cc, cgroup=path, job=tag)
            yield paths
        finally:
            try:
                admin.set_params(before)
            finally:
                try:  # nothing left in the loader's state about them
                    for path in paths.values():
                        _forget(admin, path)
                finally:  # processes left (an interrupted run's) killed, waited for
                    cgroups.remove_all(paths.values())


def _forget(admin: Any, path: Path) -> None:
    """Drop the cgroup ``path``, about to be removed, from MLTCP's loader state
    (``admin.forget_cgroup``, which detaches mltcp_select from it too); a failure is one
    line on stderr (``mltcp status`` names what is left)."""
    from mltcp.pinned import MltcpError

    try:
        admin.forget_cgroup(path)
    except (MltcpError, OSError) as e:
        print(f"testbed: mltcp forget_cgroup {path}: {e}", file=sys.stderr, flush=True)


def join(path: Path, pid: int) -> None:
    """Move process ``pid`` into the cgroup ``path`` (from the init namespaces: a Mininet
    host does not see the cgroup2 mount)."""
    (path / "cgroup.procs").write_text(str(pid))


def marks_fd() -> int:
    """An inheritable descriptor of MLTCP's iteration-marks map for the workers."""
    from mltcp import marks

    return marks.open_marks()


def job_flows(tag: str) -> list[dict[str, Any]]:
    """The flows the kernel tied to the MLTCP job ``tag``, with the iterations it counted
    on each (``mltcp status --flows``), largest first."""
    return jobs_flows({tag: tag})[tag]


def jobs_flows(tags: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """:func:`job_flows` of every job (id -> its MLTCP tag), from one ``mltcp status``
    (none without a job)."""
    if not tags:
        return {}
    from mltcp import admin, marks

    rows = admin.status(flows=True).get("flows", [])
    out = {}
    for job, tag in tags.items():
        key = marks.job_key(tag)
        flows = [f for f in rows if f["job"] == key]
        out[job] = sorted(flows, key=lambda f: -f["bytes_acked"])
    return out


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.mltcp_jobs")
