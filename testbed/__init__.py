"""The emulated cluster (Mininet, Linux bridges, shaped links) and the runs on it; the
command is ``testbed`` (:mod:`testbed.cli`).  Two modules are internal commands the
testbed starts itself (:mod:`testbed.worker`, :mod:`testbed.ddp_worker`); the others are
libraries, and say so when run with ``python -m``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

INSTEAD = "the command is testbed (testbed --help)"


def say_on_stderr(message: str) -> None:
    """One progress or warning line on stderr, flushed (the default ``say`` of the
    testbed's libraries when their caller gives none)."""
    print(message, file=sys.stderr, flush=True)


def not_a_command(module: str, instead: str = INSTEAD) -> NoReturn:
    """``python -m`` on a library module: one line on stderr saying so (``instead``: what
    to run), exit status 2."""
    print(f"python -m {module}: a library, not a command; {instead}", file=sys.stderr)
    raise SystemExit(2)


def internal_command_usage(argv: Sequence[str], usage: str, about: str) -> None:
    """The usage of an internal command (one the testbed starts, not a person) when
    ``argv`` asks for it or is empty: ``usage`` and ``about`` on stdout and exit status
    0 for ``-h``/``--help``; on stderr and exit status 2 without arguments.  Otherwise
    returns."""
    if argv and argv[0] not in ("-h", "--help"):
        return
    text = f"usage: {usage}\n\n{about}\n"
    if argv:
        sys.stdout.write(text)
        raise SystemExit(0)
    sys.stderr.write(text)
    raise SystemExit(2)
