"""cassini.shared_cache: the one cache kind of the solvers (link solutions, demand rows,
link simulations)."""

from __future__ import annotations

import pytest

from cassini.shared_cache import SharedCache


def test_the_least_recently_used_goes_first():
    cache: SharedCache[str] = SharedCache(2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # now the most recent: b goes first
    cache.put("c", "C")
    assert cache.get("b") is None and cache.get("a") == "A" and cache.get("c") == "C"
    cache.put_all([("d", "D"), ("e", "E"), ("f", "F")])
    assert len(cache) == 2 and cache.get("e") == "E" and cache.get("f") == "F"
    cache.put("e", "E2")  # a key put again is the most recent, with its new value
    cache.put("g", "G")
    assert cache.get("f") is None and cache.get("e") == "E2"
    cache.clear()
    assert len(cache) == 0 and cache.get("e") is None


def test_a_cache_holds_at_least_one_value():
    with pytest.raises(ValueError, match="size"):
        SharedCache(0)
