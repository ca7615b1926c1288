"""Reading the cluster from the API server with the official ``kubernetes`` client (the
``[kube]`` extra): the client (:func:`api_client`), paged lists as plain JSON
(:func:`list_all`), the topology objects (:func:`discover_source`) and a one-shot model
(:func:`model_from_kube`, ``cassini cluster from-kube``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cassini.errors import InputError
from cassini.service.kube.pods import PodJobs, job_pod, jobs_from_pods, jobs_on_nodes
from cassini.service.kube.topology import (
    BuiltCluster,
    Hierarchy,
    KubeNode,
    LinkOptions,
    build_cluster,
    hierarchy_from_hypernodes,
    hierarchy_from_kueue,
    hierarchy_from_labels,
    hierarchy_from_well_known_labels,
)

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1", "v1alpha1")  # newest first; the first served wins
VOLCANO_GROUP, VOLCANO_VERSION = "topology.volcano.sh", "v1alpha1"
PAGE = 500  # objects per list page


def kubernetes_module() -> Any:
    """The ``kubernetes`` package, or InputError saying how to install it."""
    try:
        import kubernetes
    except ImportError:
        raise InputError(
            "kube", "the Kubernetes client is not installed: pip install 'netaware-ml[kube]'"
        ) from None
    return kubernetes


def api_client(kubeconfig: str | None = None) -> Any:
    """An ``ApiClient``: from ``kubeconfig``, else the pod's in-cluster configuration,
    else ``$KUBECONFIG`` / ``~/.kube/config``."""
    k8s = kubernetes_module()
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig:
        from cassini import files

        data = files.read_data(kubeconfig)  # missing, empty, binary, not YAML: one line
        if not isinstance(data, dict):
            raise InputError(
                kubeconfig,
                f"not a kubeconfig: expected a mapping (clusters, contexts, users), got "
                f"{_kind(data)}",
            )
    try:
        if kubeconfig:
            return k8s.config.new_client_from_config(config_file=kubeconfig)
        try:
            cfg = k8s.client.Configuration()
            k8s.config.load_incluster_config(client_configuration=cfg)
            return k8s.client.ApiClient(cfg)
        except ConfigException:
            return k8s.config.new_client_from_config()
    except (ConfigException, OSError) as e:
        raise InputError("kubeconfig", f"cannot configure the Kubernetes client: {e}") from None
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
        # a field of the wrong shape (clusters: 3...), which the library does not check
        where = kubeconfig or "kubeconfig"
        raise InputError(where, f"malformed kubeconfig ({type(e).__name__}: {e})") from None


def _kind(value: Any) -> str:
    """What a JSON value is, in a few words (for errors)."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if value is None:
        return "null"
    return f"{type(value).__name__} {value!r}"[:80]


@dataclass(frozen=True)
class ListResult:
    """The items of a list (plain JSON) and the list's ``resourceVersion``."""

    items: list[dict[str, Any]]
    resource_version: str


def list_all(call: Callable[..., Any], **kwargs: Any) -> ListResult:
    """Every page of a list call (``CoreV1Api.list_node``...) as plain JSON."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        extra = {"_continue": token} if token else {}
        resp = call(limit=PAGE, _preload_content=False, **kwargs, **extra)
        if not 200 <= resp.status <= 299:
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=resp.status, reason=resp.reason)
        where = f"GET {_path(resp, call)}"
        try:
            body = json.loads(resp.data)
        except (ValueError, RecursionError):
            raise InputError(where, "the API server's answer is not JSON") from None
        page = _list_body(body, where)
        items.extend(page["items"])
        meta = page["metadata"]
        token = meta.get("continue") or None
        if token is None:
            return ListResult(items, str(meta.get("resourceVersion") or ""))


def _path(resp: Any, call: Callable[..., Any]) -> str:
    """The path a list call asked for (the call's name when the answer does not say)."""
    from urllib.parse import urlsplit

    try:
        url = resp.geturl()
    except Exception:
        url = None
    return urlsplit(url).path if isinstance(url, str) and url else getattr(call, "__name__", "?")


def _list_body(body: Any, where: str) -> dict[str, Any]:
    """A list answer's ``items`` (a list) and ``metadata`` (an object), or InputError
    naming ``where``."""
    if not isinstance(body, dict):
        raise InputError(where, f"the API server answered {_kind(body)}, not a list object")
    items = body.get("items") or []
    if not isinstance(items, list):
        raise InputError(f"{where}: items", f"must be a list, got {_kind(items)}")
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict):
        raise InputError(f"{where}: metadata", f"must be an object, got {_kind(meta)}")
    return {"items": items, "metadata": meta}


def _list_custom(api: Any, group: str, version: str, plural: str) -> list[dict[str, Any]] | None:
    """A cluster-scoped custom resource's objects; None when the API serves no such
    resource (404) or this service may not read it (403)."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    try:
        body = CustomObjectsApi(api).list_cluster_custom_object(group, version, plural)
    except ApiException as e:
        if e.status in (403, 404):
            return None
        raise
    return list(_list_body(body, f"GET /apis/{group}/{version}/{plural}")["items"])


@dataclass(frozen=True)
class TopologySource:
    """Where the tiers come from: node labels (``labels``), a Kueue ``Topology``
    (``kueue``), Volcano ``HyperNode`` objects (``hypernodes``), else the well-known
    region and zone labels the nodes carry (none of these given)."""

    labels: tuple[str, ...] = ()
    kueue: dict[str, Any] | None = None
    hypernodes: tuple[dict[str, Any], ...] = ()

    def hierarchy(self, nodes: list[KubeNode]) -> Hierarchy:
        if self.kueue is not None:
            return hierarchy_from_kueue(self.kueue, nodes)
        if self.hypernodes:
            return hierarchy_from_hypernodes(self.hypernodes, nodes)
        if self.labels:
            return hierarchy_from_labels(nodes, self.labels)
        return hierarchy_from_well_known_labels(nodes)


def _name(obj: Any) -> Any:
    """An object's ``metadata.name`` (None when it has none)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta.get("name") if isinstance(meta, dict) else None


def discover_source(
    api: Any, labels: tuple[str, ...] = (), kueue_topology: str | None = None
) -> TopologySource:
    """The topology to use: ``labels`` when given; else a Kueue ``Topology`` (the one
    named ``kueue_topology``, else the only one, else ``default``); else Volcano
    ``HyperNode`` objects; else the well-known region and zone node labels (the nodes
    decide which: :func:`hierarchy_from_well_known_labels`)."""
    if labels:
        return TopologySource(labels=tuple(labels))
    for version in KUEUE_VERSIONS:
        found = _list_custom(api, KUEUE_GROUP, version, "topologies")
        if found is None:
            continue
        if found:
            by_name = {_name(t): t for t in found}
            if kueue_topology is not None:
                if kueue_topology not in by_name:
                    raise InputError(
                        "kueue-topology",
                        f"no Kueue Topology {kueue_topology!r} (there are: "
                        f"{', '.join(sorted(map(str, by_name)))})",
                    )
                return TopologySource(kueue=by_name[kueue_topology])
            if len(found) == 1:
                return TopologySource(kueue=found[0])
            if "default" in by_name:
                return TopologySource(kueue=by_name["default"])
            raise InputError(
                "kueue-topology",
                f"{len(found)} Kueue Topologies ({', '.join(sorted(map(str, by_name)))}): "
                "name one with --kueue-topology",
            )
        break
    if kueue_topology is not None:
        raise InputError("kueue-topology", "the API server serves no Kueue Topology")
    hypernodes = _list_custom(api, VOLCANO_GROUP, VOLCANO_VERSION, "hypernodes")
    if hypernodes:
        return TopologySource(hypernodes=tuple(hypernodes))
    return TopologySource()


def model_from_kube(
    api: Any,
    options: LinkOptions,
    labels: tuple[str, ...] = (),
    kueue_topology: str | None = None,
    with_jobs: bool = True,
) -> tuple[BuiltCluster, PodJobs]:
    """The cluster model and the running jobs, read once; the jobs' nodes are the model's
    (a node left out, or no node at all, is dropped from its job and reported)."""
    from kubernetes.client import CoreV1Api

    core = CoreV1Api(api)
    source = discover_source(api, labels, kueue_topology)
    nodes = [KubeNode.from_object(o, f"node[{i}]") for i, o in
             enumerate(list_all(core.list_node).items)]
    built = build_cluster(nodes, source.hierarchy(nodes), options)
    pods: list[Any] = []
    if with_jobs:
        pods = [p for p in map(job_pod, list_all(core.list_pod_for_all_namespaces).items) if p]
    pod_jobs = jobs_on_nodes(jobs_from_pods(pods), built.cluster.nodes, built.left_out)
    return built, pod_jobs
