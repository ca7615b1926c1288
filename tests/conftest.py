"""Shared fixtures and the prerequisite rule.

Every test that needs something this machine may lack (root, a kernel feature, a tool, an
optional Python package) asks through :func:`require` / :func:`require_module` /
:func:`require_tool`: without the prerequisite the test skips loudly, and under ``CI=true``
(any case) it fails instead.  ``tests/test_meta.py`` fails if a test skips any other way.

Under ``CI`` (set to anything but empty/``0``/``false``) hypothesis runs the ``ci`` profile
registered here: derandomized, no per-example deadline, so CI never fails on a lucky draw or a
slow example.  (Hypothesis itself also picks a profile named ``ci`` whenever ``CI`` is set.)
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType

import pytest
from hypothesis import settings


def in_ci() -> bool:
    """Whether ``CI=true`` (case-insensitive) is set: missing prerequisites then fail."""
    return os.environ.get("CI", "").strip().lower() == "true"


def require(condition: bool, what: str) -> None:
    """Skip (or, under CI=true, fail) when a prerequisite named ``what`` is missing.

    Works at module level too (a module-level miss skips the whole file)."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI=true and a prerequisite is missing: {what}", pytrace=False)
    pytest.skip(f"SKIPPED (prerequisite missing): {what}", allow_module_level=True)


def require_module(name: str, why: str = "") -> ModuleType:
    """Import and return module ``name``; a missing module goes through :func:`require`."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        require(False, f"Python module {name} ({why or e})")
        raise  # unreachable: require skipped or failed


def require_tool(name: str, hint: str = "run make setup") -> str:
    """Path of executable ``name`` on PATH; a missing tool goes through :func:`require`."""
    path = shutil.which(name)
    require(path is not None, f"{name} ({hint})")
    assert path is not None
    return path


def require_root() -> None:
    """Effective uid 0, through :func:`require`."""
    require(os.geteuid() == 0, "root")


settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
    settings.load_profile("ci")
