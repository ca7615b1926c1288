"""One harness for every experiment: an experiment declares its options, its checks and its
run; the harness gives it the command line (``--help`` from the module docstring,
``--out``), the root check, the output folder, ``results.json`` and tables, and ends a
bad input met while running, or a Ctrl-C, with one line on stderr (exit status 2, 130).

    EXPERIMENT = Experiment(
        "regimes", __doc__, run_regimes, options=(full("the larger sweep"), iterations(30))
    )
    main = EXPERIMENT.main

``run_regimes(run)`` reads ``run.args``, writes under ``run.out`` and calls
``run.save(report)`` and ``run.show(rows, COLUMNS)`` (columns from
:mod:`experiments.columns`).  Plots are in :mod:`experiments.plots`; the job sets and
testbed configs several experiments share are in :mod:`experiments.common`.  See
docs/extending.md, "Add an experiment".
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cassini.errors import InputError
from cassini.outputs import check_output_dir
from experiments.columns import Column
from experiments.common import RESULTS, require_root, table, write_json
from testbed.run.config import MIN_ITERATIONS


class UsageError(Exception):
    """A bad command line, raised by an experiment's ``check``; its message names the flag
    and is reported as argparse reports its own errors (exit status 2)."""


def earlier_results(path: str | Path, flag: str, key: str, what: str) -> dict[str, Any]:
    """An earlier run's ``results.json`` given by ``flag``: read with the project's file
    checks (missing, a folder, empty, binary, malformed JSON) and holding a ``key``
    object (else not ``what``, e.g. another experiment's results); anything else is a
    :class:`UsageError` naming ``flag`` and the file."""
    from cassini.files import parse_json, read_text

    if not str(path).strip():
        raise UsageError(f"{flag}: an empty file name; give a results.json")
    try:
        data = parse_json(read_text(path), str(path))
    except InputError as e:
        raise UsageError(f"{flag}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), dict):
        raise UsageError(
            f"{flag}: {path}: no {key!r} object: not {what} (another experiment's results?)"
        )
    return data


def at_least(value: float | None, flag: str, minimum: float = MIN_ITERATIONS) -> None:
    """Refuse ``flag``'s ``value`` below ``minimum`` (default: the fewest iterations a
    testbed job runs) or not finite; None (the flag not given) passes."""
    if value is not None and not (math.isfinite(value) and value >= minimum):
        raise UsageError(f"{flag}: at least {minimum:g}, got {value:g}")


def positive(value: float | None, flag: str) -> None:
    """Refuse ``flag``'s ``value`` unless it is finite and above 0; None (the flag not
    given) passes."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag}: a finite number above 0, got {value:g}")


def writable_folder(path: str | Path, flag: str = "--out") -> None:
    """Refuse ``flag``'s folder ``path`` when it cannot be (made) a folder to write in: it
    is a file, a folder on its way is a file, or permission is denied."""
    try:
        check_output_dir(path)
    except InputError as e:
        raise UsageError(f"{flag}: {e}") from None


def finite(values: Sequence[float], flag: str) -> None:
    """Refuse a ``flag`` value that is nan or infinite."""
    for v in values:
        if not math.isfinite(v):
            raise UsageError(f"{flag}: finite numbers only, got {v}")


@dataclass(frozen=True)
class Option:
    """One command-line option: ``flags`` and the keywords argparse's ``add_argument`` takes."""

    flags: tuple[str, ...]
    settings: Mapping[str, Any]


def option(*flags: str, **settings: Any) -> Option:
    """An option, declared as ``argparse.ArgumentParser.add_argument`` would be called."""
    return Option(flags, settings)


def full(help: str) -> Option:
    """``--full``: the larger run, ``help`` saying what it adds."""
    return option("--full", action="store_true", help=help)


def iterations(default: int | None, help: str | None = None) -> Option:
    """``--iterations``: iterations per job and scheme (``default``; None: the experiment
    decides, e.g. from ``--full``, and ``help`` says how)."""
    if help is None:
        if default is None:
            raise ValueError("iterations(None) needs a help saying what the default is")
        help = "iterations per job and scheme (default %(default)s)"
    return option("--iterations", type=int, default=default, help=help)


@dataclass(frozen=True)
class Run:
    """What an experiment's run gets: its parsed ``args``, its output folder ``out`` and
    the command-line words ``argv`` they were parsed from."""

    args: argparse.Namespace
    out: Path
    results_name: str = "results.json"
    argv: tuple[str, ...] = ()

    @property
    def results_path(self) -> Path:
        return self.out / self.results_name

    def save(self, report: Any) -> Path:
        """Write ``report`` as the run's results JSON (again after every case, so an
        interrupted run keeps what it measured); returns its path."""
        write_json(self.results_path, report)
        return self.results_path

    def show(
        self, rows: list[dict[str, Any]], columns: Sequence[Column], title: str | None = None
    ) -> None:
        """Print ``rows`` as a table of ``columns``, under ``title`` if given."""
        if title is not None:
            print(title)
        print(table(rows, list(columns)))


Check = Callable[[argparse.Namespace], None]
NeedsRoot = bool | Callable[[argparse.Namespace], bool]


@dataclass(frozen=True)
class Experiment:
    """An experiment: ``name`` (its folder under results/), its module docstring ``doc``
    (the ``--help`` text), its ``run`` (returns an exit status, None for 0), its
    ``options``; ``check`` refuses bad flags by raising :class:`UsageError`;
    ``needs_root`` (or a function of the arguments saying so) is checked before the run;
    ``results_name`` names the results file (or a function of the arguments)."""

    name: str
    doc: str | None
    run: Callable[[Run], int | None]
    options: Sequence[Option] = ()
    check: Check | None = None
    needs_root: NeedsRoot = True
    results_name: str | Callable[[argparse.Namespace], str] = "results.json"

    def parser(self) -> argparse.ArgumentParser:
        ap = argparse.ArgumentParser(
            prog=f"python -m experiments.{self.name}",
            description=self.doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        for opt in self.options:
            ap.add_argument(*opt.flags, **opt.settings)
        ap.add_argument(
            "--out",
            default=None,
            help=f"output folder (default results/{self.name}), made when the run starts; "
            "into an existing folder a run replaces its results file whole (it then "
            "describes this run only) and the plots and run folders it writes, leaving any "
            "others there as they were",
        )
        return ap

    def main(self, argv: list[str] | None = None) -> int:
        """Parse ``argv``, check it and the output folder (``--out``), check root, run;
        the run's exit status.  Bad input met while running (an
        :class:`~cassini.errors.InputError`, e.g. a testbed config the flags made that
        ``load_config`` refuses) is one line on stderr and exit status 2, as a bad flag;
        an interrupt (Ctrl-C) is one line saying what was written and exit status 130;
        either way an output folder this run made and left empty is removed.  Any other
        failure propagates."""
        ap = self.parser()
        out: Path | None = None
        made: list[Path] = []
        before: dict[Path, tuple[int, int, int]] | None = None  # None: not started
        try:
            args = ap.parse_args(argv)
            out = self.checked_out(ap, args)
            needs_root = self.needs_root(args) if callable(self.needs_root) else self.needs_root
            if needs_root:
                require_root()
            name = self.results_name(args) if callable(self.results_name) else self.results_name
            words = tuple(sys.argv[1:] if argv is None else argv)
            made = new_folders(out)
            before = files_in(out)
            out.mkdir(parents=True, exist_ok=True)
            code = self.run(Run(args, out, name, words))
        except InputError as e:
            remove_empty(made)
            print(f"{ap.prog}: input error, the run stopped here: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            remove_empty(made)
            print(f"{ap.prog}: {interrupted(out, before)}", file=sys.stderr)
            return 130
        return 0 if code is None else code

    def checked_out(self, ap: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
        """The output folder, after the experiment's ``check`` and ``--out``'s own (not made
        yet); a bad flag ends here as argparse's errors do (exit status 2)."""
        try:
            if self.check is not None:
                self.check(args)
            if args.out is not None and not args.out.strip():
                raise UsageError(f"--out: empty, give a folder (default results/{self.name})")
            out = RESULTS / self.name if args.out is None else Path(args.out)
            writable_folder(out)
        except UsageError as e:
            ap.error(str(e))
        return out


def new_folders(path: Path) -> list[Path]:
    """The folders making ``path`` would create, deepest first."""
    missing = []
    for folder in (path, *path.absolute().parents):
        if folder.exists():
            break
        missing.append(folder)
    return missing


def remove_empty(folders: Sequence[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that is empty."""
    for folder in folders:
        with suppress(OSError):
            folder.rmdir()


def files_in(folder: Path) -> dict[Path, tuple[int, int, int]]:
    """Every file under ``folder`` with what tells a rewrite: inode, size, mtime (ns)."""
    if not folder.is_dir():
        return {}
    out = {}
    for path in folder.rglob("*"):
        with suppress(OSError):
            st = path.stat()
            if path.is_file():
                out[path] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def interrupted(out: Path | None, before: Mapping[Path, tuple[int, int, int]] | None) -> str:
    """One line for a run stopped by an interrupt: the files it wrote under ``out`` (new
    since ``before``, or rewritten), or that it wrote nothing (``before`` None: the run
    had not started)."""
    if out is None or before is None:
        return "interrupted: before the run started, nothing written"
    if not out.is_dir():
        return f"interrupted: nothing written, {out} not made"
    written = sorted(
        str(p.relative_to(out))
        for p, key in files_in(out).items()
        if before.get(p) != key and not p.name.startswith(".")
    )
    if not written:
        return f"interrupted: nothing written, {out} left as it was"
    names = ", ".join(written[:4]) + (f" and {len(written) - 4} more" if len(written) > 4 else "")
    return (
        f"interrupted: wrote {names} under {out} before the interrupt; what had not "
        "finished was not written"
    )


if __name__ == "__main__":
    from experiments import not_a_command

    not_a_command("experiments.harness")
