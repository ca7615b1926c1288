"""The experiments: each ``experiments/<name>.py`` with a ``main`` is a command,
``python -m experiments.<name>``; the others are the libraries they share."""

from __future__ import annotations

import sys
from typing import NoReturn


def not_a_command(
    module: str, instead: str = "run an experiment, python -m experiments.<name> --help"
) -> NoReturn:
    """``python -m`` on a library module: one line on stderr saying so (``instead``: what
    to run), exit status 2."""
    print(f"python -m {module}: a library, not a command; {instead}", file=sys.stderr)
    raise SystemExit(2)
