"""List, then watch, one kind of object (:class:`ListWatch`), the way an informer does:
a paged list gives every object and a ``resourceVersion``; a watch from there
(``allowWatchBookmarks``, a server-side ``timeoutSeconds``) streams ``ADDED``,
``MODIFIED`` and ``DELETED`` events, and ``BOOKMARK`` events that only move the
``resourceVersion`` on; when a watch ends it resumes from the last version seen.  An
``ERROR`` 410 Gone (the version is too old) or a 410 answer lists everything again;
other errors (a list that waited past its timeout, an error of the ``on_list`` callback
too: the list is then done again) back off exponentially (capped) and retry, each
logged in one line naming the request.  An object whose key cannot be
read (the key function's InputError: a node without a sound ``metadata.name``) is
reported in one line, naming where it was and its uid, and ignored, as the objects the
callbacks cannot read are.  Runs in its own thread."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cassini.errors import InputError
from cassini.schema import kind_of
from cassini.service.cluster import CONTROL_CHARS
from cassini.service.kube.client import (
    REQUEST_TIMEOUT_S,
    RequestFailed,
    list_all,
    list_path,
    request_failed,
)


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
    ``call`` is the client's list function (``CoreV1Api.list_node``...); ``key`` may
    raise InputError naming the field (the object is then reported and left out)."""

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
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.call = call
        self.key = key
        self.on_list = on_list
        self.on_event = on_event
        self.log = log
        self.watch_timeout_s = watch_timeout_s
        self.backoff = backoff
        self.request_timeout_s = request_timeout_s
        self.last_error: str | None = None  # why the last try failed (None: it did not)
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
            except RequestFailed as e:
                if e.status == 410:
                    self.log(f"cassini serve: watch {self.name}: 410 Gone; listing again")
                    self.resource_version = None
                    continue
                failures += 1
                self._wait(failures, str(e))
            except Exception as e:  # connection refused, reset, timeouts, bad JSON...
                if self.stopping.is_set():
                    break
                failures += 1
                self._wait(failures, f"{type(e).__name__}: {e}")

    def _wait(self, failures: int, why: str) -> None:
        self.last_error = why
        delay = self.backoff.delay(failures)
        self.log(f"cassini serve: watch {self.name}: {why}; retrying in {delay:g} s "
                 f"(error {failures} in a row)")
        self.stopping.wait(delay)

    def _list(self) -> None:
        """List, hand the objects to ``on_list``, then watch from the list's version (an
        error of either lists again, after the back-off)."""
        result = list_all(self.call, timeout_s=self.request_timeout_s)
        objects = {}
        for i, o in enumerate(result.items):
            key = self._key(o, f"items[{i}]")
            if key is not None:
                objects[key] = o
        self.on_list(objects)
        self.lists += 1
        self.resource_version = result.resource_version or None
        self.last_error = None
        self.listed.set()

    def _watch(self) -> None:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines
        from urllib3.exceptions import HTTPError

        try:
            resp = self.call(
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout_s,
                _preload_content=False,
                _request_timeout=(self.request_timeout_s, self.watch_timeout_s + 30),
            )
        except (ApiException, HTTPError) as e:
            request = f"GET {list_path(self.call)}?watch"
            raise request_failed(request, e, self.request_timeout_s) from None
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

    def _key(self, obj: Any, where: str) -> str | None:
        """``key(obj)``, or None after reporting (one line) why the object has none."""
        try:
            return self.key(obj)
        except InputError as e:
            field = f"{where}.{e.field}" if e.field else where
            self.log(f"cassini serve: watch {self.name}: {field}: {e.problem}{_uid(obj)}; "
                     "object ignored")
            return None

    def _event(self, ev: Any) -> None:
        if not isinstance(ev, dict):
            self.log(f"cassini serve: watch {self.name}: an event must be a JSON object, got "
                     f"{kind_of(ev)[:80]}; ignored")
            return
        kind = ev.get("type")
        obj = ev.get("object") or {}
        if not isinstance(obj, dict):
            obj = {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(obj.get("message") or "410 Gone")
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            key = self._key(ev.get("object"), f"{kind} event's object")
            if key is not None:
                self.on_event(kind, key, obj)
        if rv:
            self.resource_version = rv


def _uid(obj: Any) -> str:
    """`` (uid U)`` for an object whose ``metadata.uid`` can be printed, else ''."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    if not isinstance(uid, str) or not uid or len(uid) > 64 or CONTROL_CHARS.search(uid):
        return ""
    return f" (uid {uid})"
