"""Imported once by the worker pool's fork server (``set_forkserver_preload``): the
advisor's compiled searches loaded there (:func:`cassini.circle.warm_compiled`, ~1 s), so
every worker forked from it, a replacement for a killed one included, answers its first
request without paying numba's import under the request's deadline."""

from __future__ import annotations

import contextlib

from cassini.circle import warm_compiled

# only a head start: a search that fails raises in its own request
with contextlib.suppress(Exception):
    warm_compiled()
