"""MLTCP for a testbed run's jobs: each job's workers in a cgroup v2 whose TCP sockets get
the MLTCP congestion control and are tied to the job (``mltcp select --cgroup --job``),
so sockets PyTorch's gloo opens on its own are caught; the iteration mode set for the run
(``idle``: gap detection, ``exact``: the workers mark every optimizer step); afterwards
each job's flows and the iterations the kernel counted on them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from mltcp.policy import MltcpOptions

CGROUP_PREFIX = "testbed-mltcp-"


@contextlib.contextmanager
def job_cgroups(
    cc: str, tags: Mapping[str, str], options: MltcpOptions
) -> Iterator[dict[str, Path]]:
    """A cgroup per job (``tags``: job id -> the run-unique MLTCP job name), ``cc``
    selected for each, and the run's MLTCP ``options`` (its iteration mode, and the rule's
    fields it sets) over the loaded parameters; all undone on exit."""
    from mltcp import admin

    mounts = [ln.split() for ln in Path("/proc/self/mounts").read_text().splitlines()]
    root = next((m[1] for m in mounts if m[2] == "cgroup2"), None)
    mounted = None
    if root is None:
        mounted = tempfile.mkdtemp(prefix="testbed-cg2-")
        subprocess.run(["mount", "-t", "cgroup2", "none", mounted], check=True)
        root = mounted
    before = admin.get_params()
    paths: dict[str, Path] = {}
    try:
        admin.set_params(options.over(before))
        for job, tag in tags.items():
            path = Path(root) / f"{CGROUP_PREFIX}{os.getpid()}-{job}"
            path.mkdir(exist_ok=True)
            paths[job] = path
            admin.select(cc, cgroup=path, job=tag)
        yield paths
    finally:
        admin.set_params(before)
        for path in paths.values():
            for pid in (path / "cgroup.procs").read_text().split():
                subprocess.run(["kill", "-9", pid], capture_output=True)
            with contextlib.suppress(OSError):
                path.rmdir()
        if mounted:
            subprocess.run(["umount", mounted], check=False)
            os.rmdir(mounted)


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
    from mltcp import admin, marks

    key = marks.job_key(tag)
    flows = [f for f in admin.status(flows=True).get("flows", []) if f["job"] == key]
    return sorted(flows, key=lambda f: -f["bytes_acked"])


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.mltcp_jobs")
