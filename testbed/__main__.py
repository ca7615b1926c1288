"""``python -m testbed``: the ``testbed`` command (the console script's entry point,
:func:`testbed.cli.main`)."""

from __future__ import annotations

import sys

from testbed.cli import main

if __name__ == "__main__":
    sys.exit(main())
