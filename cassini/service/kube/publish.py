"""``--publish-network-topology [NAMESPACE/]NAME``: keeps the ``cassini`` entry of a
scheduler-plugins ``NetworkTopology``'s ``weights`` up to date (:class:`Publisher`, a
thread): at most every ``interval_s`` seconds, when the jobs or the model changed, it
computes the entry (:mod:`.network_costs`) and, if it differs from the object's, writes
it (get, then replace with the object's ``resourceVersion``; a conflict retries at the
next round; a missing object is created with ``configmapName: ""``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from cassini.service.kube.network_costs import WEIGHTS_NAME, Scorer, weights_entry, with_entry
from cassini.service.kube.topology import Hierarchy
from cassini.service.scoring import State

GROUP, VERSION, PLURAL = "networktopology.diktyo.x-k8s.io", "v1alpha1", "networktopologies"

Snapshot = Callable[[], tuple[Hierarchy | None, State]]


def split_name(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` or ``NAME`` (namespace ``default``)."""
    namespace, _, name = text.rpartition("/")
    return namespace or "default", name


class Publisher:
    """Publishes the ``cassini`` weights of one NetworkTopology from ``snapshot()``."""

    def __init__(self, api: Any, name: str, interval_s: float, snapshot: Snapshot,
                 score: Scorer, log: Callable[[str], None],
                 ready: threading.Event | None = None) -> None:
        self.api = api
        self.namespace, self.name = split_name(name)
        self.interval_s = interval_s
        self.snapshot = snapshot
        self.score = score
        self.log = log
        self.ready = ready or threading.Event()
        self.stopping = threading.Event()
        self.published = 0  # writes done
        self._seen: tuple[int, Hierarchy] | None = None  # (state version, model) written
        self._thread = threading.Thread(target=self.run, name="cassini-publish", daemon=True)

    def start(self) -> Publisher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def run(self) -> None:
        while not self.ready.wait(0.1):
            if self.stopping.is_set():
                return
        while not self.stopping.is_set():
            try:
                self.publish_once()
            except Exception as e:  # the API server, a conflict: try again next round
                self.log(f"cassini serve: NetworkTopology {self.namespace}/{self.name}: "
                         f"{type(e).__name__}: {e}; retrying in {self.interval_s:g} s")
                self._seen = None
            self.stopping.wait(self.interval_s)

    def publish_once(self) -> bool:
        """Write the entry if the jobs or the model changed and it differs; True if
        written."""
        from kubernetes.client import CustomObjectsApi
        from kubernetes.client.exceptions import ApiException

        hierarchy, state = self.snapshot()
        if hierarchy is None:
            return False
        seen = (state.version, hierarchy)
        if self._seen is not None and self._seen[0] == seen[0] and self._seen[1] is hierarchy:
            return False
        entry = weights_entry(hierarchy, state, self.score)
        custom = CustomObjectsApi(self.api)
        args = (GROUP, VERSION, self.namespace, PLURAL)
        try:
            obj = custom.get_namespaced_custom_object(*args, self.name)
        except ApiException as e:
            if e.status != 404:
                raise
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NetworkTopology",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"configmapName": "", "weights": [entry]}}
            custom.create_namespaced_custom_object(*args, body)
            self._done(seen, "created")
            return True
        current = [w for w in (obj.get("spec") or {}).get("weights") or []
                   if w.get("name") == WEIGHTS_NAME]
        if current == [entry]:
            self._seen = seen
            return False
        custom.replace_namespaced_custom_object(*args, self.name, with_entry(obj, entry))
        self._done(seen, "updated")
        return True

    def _done(self, seen: tuple[int, Hierarchy], how: str) -> None:
        self._seen = seen
        self.published += 1
        self.log(f"cassini serve: NetworkTopology {self.namespace}/{self.name}: "
                 f"weights '{WEIGHTS_NAME}' {how}")
