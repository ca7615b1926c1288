"""Shared fixtures.  Kernel/netns tests carry the ``root`` marker: without root or a
needed kernel feature they skip loudly, and under ``CI=true`` they fail instead."""

from __future__ import annotations

import os

import pytest


def require(condition: bool, what: str) -> None:
    """Skip (or, under CI=true, fail) when a kernel/root prerequisite is missing."""
    if condition:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and a prerequisite is missing: {what}")
    pytest.skip(f"SKIPPED (prerequisite missing): {what}")
