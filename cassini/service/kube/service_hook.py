"""The seam between ``cassini serve`` and :mod:`cassini.service.kube`: started with the
serving event loop (:func:`start_kube`), stopped with the service."""

from __future__ import annotations

from typing import Any

from cassini.service.cluster import ClusterNetwork, RunningJob
from cassini.service.kube.sync import KubeSync


class KubeRunning:
    """What ``--kube`` runs beside the service: the Nodes/Pods sync."""

    def __init__(self, sync: KubeSync) -> None:
        self.sync = sync

    def stop(self) -> None:
        self.sync.stop()


def start_kube(service: Any) -> KubeRunning:
    """Start keeping ``service``'s cluster and jobs in step with the API server: the model
    replaces the registry's cluster-file part on the service's event loop."""
    loop = service.loop

    def apply(cluster: ClusterNetwork, jobs: list[RunningJob]) -> None:
        loop.call_soon_threadsafe(service.registry.replace_file, cluster, jobs)

    return KubeRunning(KubeSync(service.config.kube, apply, service.log).start())
