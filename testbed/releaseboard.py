"""The testbed's release board: how a held job's partners learn that it runs free.

Testbed runs hand each worker its shift in a :class:`~testbed.workerspec.WorkerSpec`,
without a ``cassini serve``; the board is their registry's released flag.  It is a
directory next to the run's go file (:mod:`testbed.startgate`), one file per released
job, named by the job id, holding the reason.  A job's planner rank reads its partners'
files before every iteration (a ``stat`` each) and writes its own, once, when it releases
itself (:class:`cassini.agent.GroupRelease` decides both).  Writing a job's file by hand
releases that job and its group (``testbed.releaseboard.announce``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

BOARD_NAME = "released"  # the board's directory, next to the go file


def board_for(gate: str | Path) -> Path:
    """The release board of the run whose go file is ``gate``."""
    return Path(gate).parent / BOARD_NAME


def released_jobs(board: str | Path, jobs: Iterable[str]) -> set[str]:
    """Those of ``jobs`` whose file is on the board."""
    return {j for j in jobs if os.path.exists(os.path.join(board, j))}


def announce(board: str | Path, job_id: str, reason: str) -> None:
    """Put ``job_id`` on the board (atomically: a reader never sees half a file)."""
    path = Path(board)
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / f".{job_id}.{os.getpid()}.tmp"
    tmp.write_text(reason + "\n")
    tmp.replace(path / job_id)


def reason(board: str | Path, job_id: str) -> str | None:
    """Why ``job_id`` is on the board (None when it is not)."""
    try:
        return (Path(board) / job_id).read_text().strip()
    except FileNotFoundError:
        return None


class Board:
    """One held job's view of the board, as a ``cassini.torch.ReleaseChannel``: its
    partners' files (and its own) before every iteration, its own file when it releases
    itself."""

    def __init__(self, board: str | Path, job_id: str, partners: Iterable[str]) -> None:
        self.board, self.job_id, self.partners = Path(board), job_id, frozenset(partners)
        self._watched = (*sorted(self.partners), job_id)

    def released(self) -> set[str]:
        return released_jobs(self.board, self._watched)

    def report(self, reason: str) -> None:
        announce(self.board, self.job_id, reason)


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.releaseboard")
