"""The seam between ``cassini serve`` and :mod:`cassini.service.kube`: started with the
serving event loop (:func:`start_kube`), stopped with the service.  The model and the
pods' jobs reach the service only through ``Registry.replace_file``, called on its event
loop; the publisher reads the registry's state snapshot there too."""

from __future__ import annotations

import asyncio
from typing import Any

from cassini.service.cluster import ClusterNetwork, RunningJob
from cassini.service.kube.sync import KubeSync


class KubeRunning:
    """What ``--kube`` runs beside the service: the Nodes/Pods sync and, with
    ``--publish-network-topology``, the publisher."""

    def __init__(self, sync: KubeSync, publisher: Any = None) -> None:
        self.sync = sync
        self.publisher = publisher

    def stop(self) -> None:
        if self.publisher is not None:
            self.publisher.stop()
        self.sync.stop()


def start_kube(service: Any) -> KubeRunning:
    """Start keeping ``service``'s cluster and jobs in step with the API server: the model
    replaces the registry's cluster-file part on the service's event loop."""
    loop = service.loop
    options = service.config.kube

    def apply(cluster: ClusterNetwork, jobs: list[RunningJob]) -> None:
        loop.call_soon_threadsafe(service.registry.replace_file, cluster, jobs)

    sync = KubeSync(options, apply, service.log).start()
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
    return KubeRunning(sync, publisher)
