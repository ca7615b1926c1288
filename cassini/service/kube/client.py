"""Reading the cluster from the API server with the official ``kubernetes`` client (the
``[kube]`` extra): the client (:func:`api_client`), paged lists as plain JSON
(:func:`list_all`), the topology objects (:func:`discover_source`) and a one-shot model
(:func:`model_from_kube`, ``cassini cluster from-kube``).  Every list request has a
bounded wait (:data:`REQUEST_TIMEOUT_S`, never retried after a timeout); a request that
fails is a :class:`RequestFailed` naming it in one line."""

from __future__ import annotations

import json
import os
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
#: Seconds one list request may wait for the API server (connecting and answering) before
#: it fails as timed out (``serve --kube`` retries with back-off; ``from-kube`` exits 1).
REQUEST_TIMEOUT_S = 30.0
#: Paths of the list calls, for the errors that name them (an answer's own URL is read
#: when there is one).
LIST_PATHS = {"list_node": "/api/v1/nodes", "list_pod_for_all_namespaces": "/api/v1/pods"}


def list_path(call: Any) -> str:
    """The request path a client list call asks for (its name when not in LIST_PATHS)."""
    name = getattr(call, "__name__", "?")
    return LIST_PATHS.get(name, name)


def kubernetes_module() -> Any:
    """The ``kubernetes`` package, or InputError saying how to install it."""
    try:
        import kubernetes
    except ImportError:
        raise InputError(
            "kube", "the Kubernetes client is not installed: pip install 'netaware-ml[kube]'"
        ) from None
    return kubernetes


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ``ApiClient``: from ``kubeconfig`` (its ``context``, else its current one), else
    the pod's in-cluster configuration (unless a ``context`` is named), else
    ``$KUBECONFIG`` / ``~/.kube/config``.  Its requests are retried (a dropped keep-alive
    connection) but never after a timeout."""
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
    if context is not None:
        check_context(kubeconfig, context)
    cfg = k8s.client.Configuration()
    cfg.retries = _retries()
    try:
        if kubeconfig or context is not None:
            return k8s.config.new_client_from_config(
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
        try:
            k8s.config.load_incluster_config(client_configuration=cfg)
            return k8s.client.ApiClient(cfg)
        except ConfigException:
            return k8s.config.new_client_from_config(client_configuration=cfg)
    except (ConfigException, OSError) as e:
        raise InputError("kubeconfig", f"cannot configure the Kubernetes client: {e}") from None
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
        # a field of the wrong shape (clusters: 3...), which the library does not check
        where = kubeconfig or "kubeconfig"
        raise InputError(where, f"malformed kubeconfig ({type(e).__name__}: {e})") from None


def check_context(kubeconfig: str | None, context: str) -> None:
    """InputError naming ``--context`` and the contexts there are when the kubeconfig
    (``kubeconfig``, else ``$KUBECONFIG``'s files, else ``~/.kube/config``) has no
    context ``context``."""
    from cassini import files

    if kubeconfig:
        paths = [kubeconfig]
    else:
        paths = [os.path.expanduser(p) for p in
                 os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep) if p]
        paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        raise InputError("--context", "no kubeconfig to find it in (give --kubeconfig, or "
                         "set $KUBECONFIG)")
    names: list[str] = []
    for path in paths:
        data = files.read_data(path)
        contexts = data.get("contexts") if isinstance(data, dict) else None
        names += [str(c["name"]) for c in contexts or []
                  if isinstance(c, dict) and c.get("name") is not None]
    if context not in names:
        known = ", ".join(sorted(set(names))) or "none"
        raise InputError("--context", f"no context {context!r} in {', '.join(paths)} (there "
                         f"are: {known})")


def _retries() -> Any:
    """urllib3's retries as the client has them (3), except after a timeout: a request
    then fails at once, so that its wait stays bounded by its timeout."""
    from urllib3.exceptions import NewConnectionError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout
    from urllib3.util.retry import Retry

    class NoRetryOnTimeout(Retry):
        def increment(self, method: Any = None, url: Any = None, response: Any = None,
                      error: Any = None, _pool: Any = None, _stacktrace: Any = None) -> Any:
            # a refused connection is a NewConnectionError, which urllib3 makes a
            # ConnectTimeoutError too: retried as before
            if isinstance(error, Urllib3Timeout) and not isinstance(error, NewConnectionError):
                raise error
            return super().increment(method, url, response, error, _pool, _stacktrace)

    return NoRetryOnTimeout(3)


def _kind(value: Any) -> str:
    """What a JSON value is, in a few words (for errors)."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if value is None:
        return "null"
    return f"{type(value).__name__} {value!r}"[:80]


class RequestFailed(Exception):
    """A request to the API server that failed: ``request`` (``GET /api/v1/pods``), the
    answer's ``status`` (None: no answer: refused, timed out...), ``timed_out``, and
    ``why`` in one line (the status, its reason and the server's message)."""

    def __init__(self, request: str, why: str, status: int | None = None,
                 timed_out: bool = False) -> None:
        super().__init__(f"{request}: {why}")
        self.request, self.why, self.status, self.timed_out = request, why, status, timed_out


def request_failed(request: str, e: Exception, timeout_s: float | None = None) -> RequestFailed:
    """``e`` (the client's ApiException, or urllib3's error) as a :class:`RequestFailed`
    for ``request``."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import MaxRetryError, NewConnectionError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    if isinstance(e, ApiException):
        why = f"{e.status} {e.reason}" if e.status else _one_line(str(e.reason))
        message = _status_message(e.body)
        if message:
            why += f": {message}"
        if e.status in (401, 403):
            why += (" (check the kubeconfig's credentials)" if e.status == 401 else
                    " (RBAC: deploy/cassini-kube.yaml's ClusterRole lists what it needs)")
        return RequestFailed(request, why, e.status or None)
    cause = e.reason if isinstance(e, MaxRetryError) and e.reason is not None else e
    if isinstance(cause, NewConnectionError):  # before timeouts: urllib3 makes it one too
        text = str(cause).split("connection: ", 1)[-1]
        return RequestFailed(request, f"cannot connect: {_one_line(text)}")
    if isinstance(cause, Urllib3Timeout | TimeoutError):
        wait = f" after {timeout_s:g} s" if timeout_s is not None else ""
        return RequestFailed(request, f"timed out{wait}", timed_out=True)
    return RequestFailed(request, f"{type(cause).__name__}: {_one_line(str(cause))}")


def _status_message(body: Any) -> str:
    """The ``message`` of an error answer's Status object ('' when there is none)."""
    try:
        status = json.loads(body) if isinstance(body, str | bytes) else None
    except (ValueError, RecursionError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return _one_line(message) if isinstance(message, str) else ""


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (control characters as spaces), at most ``limit`` characters."""
    from cassini.schema import CONTROL_CHARS

    line = " ".join(CONTROL_CHARS.sub(" ", text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass(frozen=True)
class ListResult:
    """The items of a list (plain JSON) and the list's ``resourceVersion``."""

    items: list[dict[str, Any]]
    resource_version: str


def list_all(call: Callable[..., Any], *, timeout_s: float = REQUEST_TIMEOUT_S,
             **kwargs: Any) -> ListResult:
    """Every page of a list call (``CoreV1Api.list_node``...) as plain JSON, each page
    within ``timeout_s`` seconds; RequestFailed naming the request when one fails."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    items: list[dict[str, Any]] = []
    token: str | None = None
    request = f"GET {list_path(call)}"
    while True:
        extra = {"_continue": token} if token else {}
        try:
            resp = call(limit=PAGE, _preload_content=False, _request_timeout=timeout_s,
                        **kwargs, **extra)
            if not 200 <= resp.status <= 299:
                raise ApiException(status=resp.status, reason=resp.reason)
            where = f"GET {_path(resp, call)}"
            data = resp.data
        except (ApiException, HTTPError, TimeoutError) as e:
            raise request_failed(request, e, timeout_s) from None
        try:
            body = json.loads(data)
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


def _list_custom(api: Any, group: str, version: str, plural: str,
                 timeout_s: float = REQUEST_TIMEOUT_S) -> list[dict[str, Any]] | None:
    """A cluster-scoped custom resource's objects; None when the API serves no such
    resource (404) or this service may not read it (403); RequestFailed otherwise."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    request = f"GET /apis/{group}/{version}/{plural}"
    try:
        body = CustomObjectsApi(api).list_cluster_custom_object(
            group, version, plural, _request_timeout=timeout_s
        )
    except ApiException as e:
        if e.status in (403, 404):
            return None
        raise request_failed(request, e, timeout_s) from None
    except (HTTPError, TimeoutError) as e:
        raise request_failed(request, e, timeout_s) from None
    return list(_list_body(body, request)["items"])


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


def check_source_options(labels: tuple[str, ...], kueue_topology: str | None) -> None:
    """InputError naming both flags when ``--topology-labels`` and ``--kueue-topology``
    are both given (the labels would win and the Topology be ignored)."""
    if labels and kueue_topology is not None:
        raise InputError(
            "--topology-labels, --kueue-topology",
            "give one, not both (--topology-labels names the tiers' node labels; "
            "--kueue-topology picks the Kueue Topology that names them)",
        )


def discover_source(
    api: Any, labels: tuple[str, ...] = (), kueue_topology: str | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> TopologySource:
    """The topology to use: ``labels`` when given; else a Kueue ``Topology`` (the one
    named ``kueue_topology``, else the only one, else ``default``); else Volcano
    ``HyperNode`` objects; else the well-known region and zone node labels (the nodes
    decide which: :func:`hierarchy_from_well_known_labels`).  RequestFailed when a list
    of the topology objects fails (other than 403/404: not served or not readable)."""
    check_source_options(labels, kueue_topology)
    if labels:
        return TopologySource(labels=tuple(labels))
    for version in KUEUE_VERSIONS:
        found = _list_custom(api, KUEUE_GROUP, version, "topologies", timeout_s)
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
    hypernodes = _list_custom(api, VOLCANO_GROUP, VOLCANO_VERSION, "hypernodes", timeout_s)
    if hypernodes:
        return TopologySource(hypernodes=tuple(hypernodes))
    return TopologySource()


def model_from_kube(
    api: Any,
    options: LinkOptions,
    labels: tuple[str, ...] = (),
    kueue_topology: str | None = None,
    with_jobs: bool = True,
    timeout_s: float | None = None,
) -> tuple[BuiltCluster, PodJobs]:
    """The cluster model and the running jobs, read once; the jobs' nodes are the model's
    (a node left out, or no node at all, is dropped from its job and reported).  Each
    request waits at most ``timeout_s`` (None: :data:`REQUEST_TIMEOUT_S`) seconds."""
    from kubernetes.client import CoreV1Api

    wait = REQUEST_TIMEOUT_S if timeout_s is None else timeout_s
    core = CoreV1Api(api)
    source = discover_source(api, labels, kueue_topology, wait)
    nodes = [KubeNode.from_object(o, f"node[{i}]") for i, o in
             enumerate(list_all(core.list_node, timeout_s=wait).items)]
    built = build_cluster(nodes, source.hierarchy(nodes), options)
    pods: list[Any] = []
    if with_jobs:
        listed = list_all(core.list_pod_for_all_namespaces, timeout_s=wait).items
        pods = [p for p in map(job_pod, listed) if p]
    pod_jobs = jobs_on_nodes(jobs_from_pods(pods), built.cluster.nodes, built.left_out)
    return built, pod_jobs
