"""Secondary trace tables (PAI's task and instance tables, Lingjun's ``worker.csv``): a
malformed or cut-short row there rejects its whole job as one bad row named at that row."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cassini.sim.traces.common import BadRow, Row, TraceRead


def require_columns(row: Row, columns: Sequence[str]) -> None:
    """BadRow naming the first of ``columns`` the row lacks (a line cut short): a
    missing column is not an empty cell."""
    missing = [c for c in columns if c not in row.cells]
    if missing:
        raise row.error(missing[0], "missing column: the row ends before it (truncated line?)")


class SecondaryRows:
    """Bad rows of secondary tables, held per job (``key``: the column naming it) until
    the job's own row is read.  Under ``strict`` a bad row raises at once."""

    def __init__(self, *, strict: bool, key: str = "job_name") -> None:
        self.strict = strict
        self.key = key
        self.failed: dict[str, list[BadRow]] = {}
        self.rejected: dict[str, BadRow] = {}  # job -> the bad row it was rejected for

    def guard(self, parse: Callable[[Row], None], columns: Sequence[str]) -> Callable[[Row], None]:
        """``parse`` with a row lacking any of ``columns`` bad, and a bad row held for its
        job (a row naming no job is a bad row of its own)."""

        def run(row: Row) -> None:
            try:
                require_columns(row, columns)
                parse(row)
            except BadRow as e:
                if self.strict or not row.present(self.key):
                    raise
                self.failed.setdefault(str(row.raw(self.key)), []).append(e)

        return run

    def check(self, row: Row) -> None:
        """For a job's own row: the BadRow of its first bad secondary row (the job is
        rejected as that one bad row); a later row of a job already rejected so is a
        duplicate job id."""
        if not row.present(self.key):
            return
        job = str(row.raw(self.key))
        if job in self.rejected:
            raise row.error(
                self.key, f"duplicate job id {job!r} (rejected before for {self.rejected[job]})"
            )
        errors = self.failed.get(job)
        if not errors:
            return
        first = errors[0]
        if len(errors) > 1:
            more = len(errors) - 1
            first = BadRow(
                first.file,
                first.line,
                first.column,
                first.field,
                f"{first.problem} (and {more} more bad row{'s' if more > 1 else ''} of "
                f"job {job!r}: {', '.join(f'{e.file}:{e.line}' for e in errors[1:4])}"
                f"{' ...' if more > 3 else ''})",
            )
        self.rejected[job] = first
        raise first

    def leftover(self, out: TraceRead) -> None:
        """Bad secondary rows of jobs that no job row named: bad rows of their own."""
        for job, errors in self.failed.items():
            if job not in self.rejected:
                out.bad.extend(errors)
