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


def pytest_collection_modifyitems(config, items):
    """Tests marked ``last`` run after all the others: a failing many-flow test can leave
    orphaned sockets holding an unregistered congestion control for minutes, which other
    kernel tests' clean-up checks would see."""
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)
