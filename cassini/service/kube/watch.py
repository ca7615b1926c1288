"""List, then watch, one kind of object (:class:`ListWatch`), the way an informer does:
a paged list gives every object and a ``resourceVersion``; a watch from there
(``allowWatchBookmarks``, a server-side ``timeoutSeconds``) streams ``ADDED``,
``MODIFIED`` and ``DELETED`` events, and ``BOOKMARK`` events that only move the
``resourceVersion`` on; when a watch ends it resumes from the last version seen.  An
``ERROR`` 410 Gone (the version is too old) or a 410 answer lists everything again;
other errors back off exponentially (capped) and retry.  Runs in its own thread."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cassini.service.kube.client import list_all


@dataclass(frozen=True)
class Backoff:
    """Seconds to wait after the n-th error in a row: ``first_s * 2**(n-1)``, at most
    ``max_s``."""

    first_s: float = 0.5
    max_s: float = 30.0

    def delay(self, failures: int) -> float:
        return min(self.max_s, self.first_s * 2 ** max(0, failures - 1))


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class ListWatch:
    """Keeps ``on_list(objects)`` (key -> object JSON, after each full list) and
    ``on_event(type, key, object)`` (after each change) called for one kind of object;
    ``call`` is the client's list function (``CoreV1Api.list_node``...)."""

    def __init__(
        self,
        name: str,
        call: Callable[..., Any],
        key: Callable[[dict[str, Any]], str],
        on_list: Callable[[dict[str, dict[str, Any]]], None],
        on_event: Callable[[str, str, dict[str, Any]], None],
        log: Callable[[str], None],
        *,
        watch_timeout_s: int = 300,
        backoff: Backoff = Backoff(),
    ) -> None:
        self.name = name
        self.call = call
        self.key = key
        self.on_list = on_list
        self.on_event = on_event
        self.log = log
        self.watch_timeout_s = watch_timeout_s
        self.backoff = backoff
        self.resource_version: str | None = None
        self.lists = 0  # full lists done (the first, then one per 410 Gone)
        self.stopping = threading.Event()
        self.listed = threading.Event()  # set after the first full list
        self._resp: Any = None
        self._thread = threading.Thread(target=self.run, name=f"cassini-watch-{name}",
                                        daemon=True)

    def start(self) -> ListWatch:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop: ends a watch in flight and waits (at most ``timeout_s``) for the thread."""
        self.stopping.set()
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):  # a response already closed
                resp.shutdown()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        failures = 0
        while not self.stopping.is_set():
            try:
                if self.resource_version is None:
                    self._list()
                self._watch()
                failures = 0
            except Gone as e:
                self.log(f"cassini serve: watch {self.name}: {e}; listing again")
                self.resource_version = None
            except ApiException as e:
                if e.status == 410:
                    self.log(f"cassini serve: watch {self.name}: 410 Gone; listing again")
                    self.resource_version = None
                    continue
                failures += 1
                self._wait(failures, f"the API server answered {e.status} {e.reason}")
            except Exception as e:  # connection refused, reset, timeouts, bad JSON...
                if self.stopping.is_set():
                    break
                failures += 1
                self._wait(failures, f"{type(e).__name__}: {e}")

    def _wait(self, failures: int, why: str) -> None:
        delay = self.backoff.delay(failures)
        self.log(f"cassini serve: watch {self.name}: {why}; retrying in {delay:g} s "
                 f"(error {failures} in a row)")
        self.stopping.wait(delay)

    def _list(self) -> None:
        result = list_all(self.call)
        objects = {self.key(o): o for o in result.items}
        self.resource_version = result.resource_version or None
        self.lists += 1
        self.on_list(objects)
        self.listed.set()

    def _watch(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        resp = self.call(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_s,
            _preload_content=False,
            _request_timeout=(10, self.watch_timeout_s + 30),
        )
        self._resp = resp
        try:
            for line in iter_resp_lines(resp):
                if self.stopping.is_set():
                    return
                if not line.strip():
                    continue
                self._event(json.loads(line))
        finally:
            self._resp = None
            resp.release_conn()

    def _event(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        obj = ev.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(obj.get("message") or "410 Gone")
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.on_event(kind, self.key(obj), obj)
        if rv:
            self.resource_version = rv
