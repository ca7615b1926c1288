"""The seam between ``cassini serve`` and :mod:`cassini.service.kube`: started with the
serving event loop (:func:`start_kube`), stopped with the service.  The model and the
pods' jobs reach the service only through ``Registry.replace_file``, called on its event
loop (with the pods' conflicting job ids, which it lists as unusable); the publisher
reads the registry's state snapshot there too."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from cassini.service.cluster import ClusterNetwork, RunningJob
from cassini.service.kube.sync import KubeSync


class KubeRunning:
    """What ``--kube`` runs beside the service: the Nodes/Pods sync and, with
    ``--publish-network-topology``, the publisher; ``failed``: the line a fatal error of
    the sync stops the service with (None: none), handed to :meth:`on_fatal`'s callback;
    ``applied``: a model reached the registry (set on the serving event loop)."""

    def __init__(self, sync: KubeSync | None = None, publisher: Any = None) -> None:
        self.sync = sync
        self.publisher = publisher
        self.failed: str | None = None
        self.applied = False
        self._on_fatal: Callable[[str], None] | None = None
        self._lock = threading.Lock()

    def not_ready(self) -> str | None:
        """Why the service cannot answer from the cluster yet (``GET /readyz``'s 503), or
        None once the first model was applied."""
        if self.applied:
            return None
        if self.failed is not None:
            return f"no cluster model: {self.failed}"
        why = "no cluster model yet: waiting for the Kubernetes API server's nodes and pods"
        watches = self.sync.watches if self.sync is not None else []
        errors = [f"watch {w.name}: {w.last_error}" for w in watches if w.last_error]
        return f"{why} (last error: {'; '.join(errors)})" if errors else why

    def fail(self, line: str) -> None:
        """The sync cannot go on: tell the callback (now, or when it is given)."""
        with self._lock:
            if self.failed is not None:
                return
            self.failed = line
            callback = self._on_fatal
        if callback is not None:
            callback(line)

    def on_fatal(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(line)`` on a fatal error (at once if one came already)."""
        with self._lock:
            self._on_fatal = callback
            line = self.failed
        if line is not None:
            callback(line)

    def stop(self) -> None:
        if self.publisher is not None:
            self.publisher.stop()
        if self.sync is not None:
            self.sync.stop()


def start_kube(service: Any) -> KubeRunning:
    """Start keeping ``service``'s cluster and jobs in step with the API server: the model
    replaces the registry's cluster-file part on the service's event loop."""
    loop = service.loop
    options = service.config.kube
    running = KubeRunning()

    def apply(cluster: ClusterNetwork, jobs: list[RunningJob], left_out: dict[str, str]) -> None:
        def replace() -> None:
            service.registry.replace_file(cluster, jobs, left_out)
            running.applied = True  # after the registry has it: /readyz says ready

        loop.call_soon_threadsafe(replace)

    sync = running.sync = KubeSync(options, apply, service.log, fatal=running.fail).start()
    publisher = None
    if options.publish_network_topology:
        from cassini.service.kube.network_costs import cassini_scorer
        from cassini.service.kube.publish import Publisher

        async def state() -> Any:
            return service.registry.state()

        def snapshot() -> Any:
            current = asyncio.run_coroutine_threadsafe(state(), loop).result(30)
            return sync.hierarchy, current

        publisher = Publisher(
            sync.api, options.publish_network_topology, options.publish_interval_s, snapshot,
            cassini_scorer(service.config.precision_deg), service.log, ready=sync.synced,
        ).start()
    running.publisher = publisher
    return running
