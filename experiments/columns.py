"""Table columns: the :class:`Column` type and the columns several experiments' tables
share (``run.show(rows, columns)`` in :mod:`experiments.harness` prints them)."""

from __future__ import annotations

from typing import NamedTuple


class Column(NamedTuple):
    """One table column: the row's ``key``, the ``header`` printed, the ``fmt`` for numbers."""

    key: str
    header: str
    fmt: str = "s"


# columns several experiments' tables share
SCHEME = Column("scheme", "scheme")
JOB = Column("job", "job")
MEAN_MS = Column("mean_ms", "mean ms", ".1f")
P99_MS = Column("p99_ms", "p99 ms", ".1f")
MEAN_VS_IDEAL = Column("mean_vs_ideal", "mean/ideal", ".2f")
P99_VS_IDEAL = Column("p99_vs_ideal", "p99/ideal", ".2f")
SAME_START_VS_IDEAL = Column("baseline_vs_ideal", "same start/ideal", ".2f")
CASSINI_VS_IDEAL = Column("cassini_vs_ideal", "CASSINI/ideal", ".2f")
REALIGNED = Column("realignments", "realigned", "d")
RELEASED = Column("released", "released", "d")
#: "declined: baseline's run, not re-run" where CASSINI's row is a copy of another run
NOTE = Column("note", "note")
# mean and p99 iteration time, and both over the jobs alone (ideal)
TIMES_VS_IDEAL = (MEAN_MS, P99_MS, MEAN_VS_IDEAL, P99_VS_IDEAL)


if __name__ == "__main__":
    from experiments import not_a_command

    not_a_command("experiments.columns")
