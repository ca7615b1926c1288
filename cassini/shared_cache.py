"""One kind of cache for the pure solvers' results that recur across calls (link
solutions, demand rows, link simulations): a size-limited map, least recently used out
first, that threads share and forked children inherit safely.

Each look-up (with its move to the end), each insertion (with its evictions) and each
clearing holds the cache's lock: a value found by one thread is never evicted by another
between the two steps.  The value itself is computed outside the lock (two threads may
both compute the same one; the second insertion keeps an equal value).  A child forked
while another thread held a lock (the advisor's process pool) would wait for it forever:
every cache gets a fresh lock in a forked child (``os.register_at_fork``).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

V = TypeVar("V")

_CACHES: weakref.WeakSet[SharedCache] = weakref.WeakSet()


class SharedCache(Generic[V]):
    """At most ``size`` values by key, the least recently used evicted first."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.items: OrderedDict[Hashable, V] = OrderedDict()
        self.lock = threading.Lock()
        _CACHES.add(self)

    def get(self, key: Hashable) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> None:
        """Keep ``value`` for ``key``, evicting the least recently used beyond ``size``."""
        self.put_all(((key, value),))

    def put_all(self, pairs: Iterable[tuple[Hashable, V]]) -> None:
        """:meth:`put` each pair, under one hold of the lock."""
        with self.lock:
            for key, value in pairs:
                self.items[key] = value
                self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.items.clear()

    def __len__(self) -> int:
        return len(self.items)


def _fresh_locks() -> None:
    for cache in list(_CACHES):
        cache.lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_locks)
