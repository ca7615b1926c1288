"""``python -m`` on the testbed's modules: the internal worker commands answer ``--help``
with a usage line saying the testbed starts them, and the library modules say they are
no command (exit status 2) instead of exiting 0 without a word."""

from __future__ import annotations

import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {"testbed.__main__", "testbed.cli", "testbed.worker", "testbed.ddp_worker"}
LIBRARIES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in [*(ROOT / "testbed").glob("*.py"), *(ROOT / "testbed" / "run").glob("*.py")]
    if p.stem != "__init__" and ".".join(p.relative_to(ROOT).with_suffix("").parts) not in COMMANDS
)


@pytest.mark.parametrize("module", ["testbed.worker", "testbed.ddp_worker"])
def test_a_worker_command_helps_and_says_the_testbed_starts_it(module):
    """``--help`` was a traceback (IndexError / FileNotFoundError on a spec named
    ``--help``), no argument an IndexError."""
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.startswith(f"usage: python -m {module} SPEC_JSON"), r.stdout
    assert "internal command" in r.stdout and "testbed run" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"usage: python -m {module} SPEC_JSON"), r.stderr


def test_the_library_list_is_not_empty():
    assert {"testbed.net", "testbed.run.session", "testbed.topo"} <= set(LIBRARIES)


@pytest.mark.parametrize("module", LIBRARIES)
def test_a_testbed_library_run_as_a_command_says_it_is_none(module, capsys):
    """``python -m testbed.net`` (and every other library module) exited 0 silently."""
    with warnings.catch_warnings():  # runpy: the module is imported already (here)
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(SystemExit) as exit_:
            runpy.run_module(module, run_name="__main__")
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.count("\n") == 1 and f"python -m {module}: a library, not a command" in err, err
    assert "testbed --help" in err
