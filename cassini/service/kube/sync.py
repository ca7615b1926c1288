"""``cassini serve --kube``: the cluster model and the running jobs kept in step with the
API server (:class:`KubeSync`), handed to the service through one seam, ``apply(cluster,
jobs)`` (:func:`attach` makes it :meth:`Registry.replace_file
<cassini.service.registry.Registry.replace_file>` on the serving event loop: the
cluster and jobs take the place of a cluster file's; jobs registered over HTTP, explicit
shifts and the epoch stay in the state file).

Nodes and Pods are each listed then watched (:class:`~.watch.ListWatch`).  The topology
source (Kueue ``Topology``, Volcano ``HyperNode``, or ``--topology-labels``) is looked up
at every full list of the nodes (none found: the well-known region and zone node
labels), and read again without a restart (:meth:`KubeSync.refresh_topology`, in its own
thread): when a node event brings a node the model cannot place (at most every
``topology_recheck_s``) and every ``topology_resync_s``; a change of the tiers or of
where nodes sit is logged and rebuilds the model.  Reading the topology objects at the
first list fails on any API error (the node list is then retried with the watches'
back-off); later, the previous topology is kept.  A node added, relabelled or
removed rebuilds the model; a job whose pods sit on a node no longer in the model is kept
and reported (its other nodes still count); a job id that pods of two namespaces (or
with two profiles) carry is left out and reported, and handed to ``apply`` as such.  A
model that cannot be built is logged and the previous one kept; when there is none yet
(the first model), a model that cannot be built or holds no node is fatal
(``fatal(line)``), not an empty cluster served."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cassini.errors import InputError
from cassini.service.cluster import ClusterNetwork, RunningJob
from cassini.service.kube.client import REQUEST_TIMEOUT_S, check_source_options
from cassini.service.kube.pods import JobPod, job_pod, jobs_from_pods, pod_key
from cassini.service.kube.topology import KubeNode, LinkOptions, build_cluster, object_name
from cassini.service.kube.watch import Backoff, ListWatch


@dataclass(frozen=True)
class KubeOptions:
    """``cassini serve --kube``'s options: the kubeconfig (None: in-cluster) and its
    context (None: its current one), the topology (labels, or a Kueue Topology's name,
    else discovered), link capacities, the NetworkTopology to publish
    (``[NAMESPACE/]NAME``, None: none) and how often at most (seconds), the watches'
    server-side timeout (seconds), how long a list request may wait (seconds), and how
    often the topology objects are read again: at most every ``topology_recheck_s``
    seconds for a node the model cannot place, and every ``topology_resync_s`` seconds."""

    kubeconfig: str | None = None
    topology_labels: tuple[str, ...] = ()
    kueue_topology: str | None = None
    links: LinkOptions = field(default_factory=LinkOptions)
    publish_network_topology: str | None = None
    publish_interval_s: float = 30.0
    watch_timeout_s: int = 300
    backoff: Backoff = field(default_factory=Backoff)
    context: str | None = None
    request_timeout_s: float = REQUEST_TIMEOUT_S
    topology_recheck_s: float = 10.0
    topology_resync_s: float = 300.0

    def __post_init__(self) -> None:
        check_source_options(self.topology_labels, self.kueue_topology)
        for name in ("request_timeout_s", "topology_recheck_s", "topology_resync_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < float("inf")):
                raise InputError(name, f"must be a finite number of seconds > 0, got {value!r}")


#: ``apply(cluster, jobs, left_out)``: the model, the pods' jobs, and the job ids left
#: out for a conflict (id -> why)
Apply = Callable[[ClusterNetwork, list[RunningJob], dict[str, str]], None]


class KubeSync:
    """Watches Nodes and Pods; after both first lists, and after every change that
    matters, builds the model and calls ``apply(cluster, jobs, left_out)`` (from a watch
    thread)."""

    def __init__(self, options: KubeOptions, apply: Apply, log: Callable[[str], None],
                 api: Any = None, fatal: Callable[[str], None] | None = None) -> None:
        self.options = options
        self.apply = apply
        self.log = log
        self.api = api
        self.fatal = fatal  # called once, from a watch thread, with the line to exit on
        self.failed: str | None = None  # that line: the watches stopped, nothing applied
        self.source: Any = None
        self.source_error: str | None = None  # why the topology could not be read
        self.nodes: dict[str, KubeNode] = {}
        self.pods: dict[str, JobPod] = {}
        self.cluster = ClusterNetwork()
        self.jobs: dict[str, RunningJob] = {}
        self.hierarchy: Any = None
        self._reported: dict[str, Any] = {}
        self._listed: set[str] = set()  # "nodes", "pods": first list applied
        self._lock = threading.RLock()
        self.synced = threading.Event()  # set after the first model was applied
        self.watches: list[ListWatch] = []
        self.discovered_at: float | None = None  # time.monotonic() of the last lookup
        self._want_topology = threading.Event()  # a node the model cannot place came
        self._stopping = threading.Event()
        self._refresher = threading.Thread(target=self._refresh_loop, daemon=True,
                                           name="cassini-kube-topology")

    def start(self) -> KubeSync:
        from kubernetes.client import CoreV1Api

        from cassini.service.kube.client import api_client

        if self.api is None:
            self.api = api_client(self.options.kubeconfig, self.options.context)
        core = CoreV1Api(self.api)
        common = {"log": self.log, "watch_timeout_s": self.options.watch_timeout_s,
                  "backoff": self.options.backoff,
                  "request_timeout_s": self.options.request_timeout_s}
        self.watches = [
            ListWatch("nodes", core.list_node, object_name,
                      self._nodes_listed, self._node_event, **common),
            ListWatch("pods", core.list_pod_for_all_namespaces, pod_key,
                      self._pods_listed, self._pod_event, **common),
        ]
        for w in self.watches:
            w.start()
        if not self.options.topology_labels:  # labels: nothing to read again
            self._refresher.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._want_topology.set()  # wakes the refresher, which then sees _stopping
        for w in self.watches:
            w.stopping.set()
        for w in self.watches:
            w.stop()
        if self._refresher.is_alive():
            self._refresher.join(5.0)

    # the topology
    def _discover(self) -> Any:
        """The topology source read now (InputError: one it cannot use; RequestFailed:
        the API failed)."""
        from cassini.service.kube.client import discover_source

        o = self.options
        self.discovered_at = time.monotonic()
        return discover_source(self.api, o.topology_labels, o.kueue_topology,
                               o.request_timeout_s)

    def refresh_topology(self) -> bool:
        """Read the topology objects again; when the tiers or where a node sits changed,
        log it and rebuild the model.  True when it changed."""
        from cassini.service.kube.client import RequestFailed

        try:
            source = self._discover()
        except (InputError, RequestFailed) as e:
            self.log(f"cassini serve: kube: topology: {e}; keeping the previous topology")
            return False
        with self._lock:
            if self.hierarchy is None or self.failed is not None:  # no model yet: the lists
                return False
            try:
                hierarchy = source.hierarchy(list(self.nodes.values()))
            except InputError as e:
                self.log(f"cassini serve: kube: topology: {e}; keeping the previous model")
                return False
            if hierarchy == self.hierarchy:
                self.source = source  # the same model (a status, a resourceVersion moved)
                return False
            self.log(f"cassini serve: kube: the topology changed ({hierarchy.source}); "
                     "rebuilding the model")
            self.source = source
            self._rebuild()
            return True

    def _refresh_loop(self) -> None:
        """Reads the topology again when a node the model cannot place came (at most every
        ``topology_recheck_s``) and every ``topology_resync_s`` seconds."""
        o = self.options
        while not self._stopping.is_set():
            since = time.monotonic() - (self.discovered_at or time.monotonic())
            wanted = self._want_topology.is_set()
            wait = (o.topology_recheck_s if wanted else o.topology_resync_s) - since
            if wait > 0:  # woken early by a want (or stop): count again
                (self._stopping if wanted else self._want_topology).wait(wait)
                continue
            self._want_topology.clear()
            if self._stopping.is_set():
                return
            try:
                self.refresh_topology()
            except Exception as e:  # a bug: said, and the next round tries again
                self.discovered_at = time.monotonic()
                self.log(f"cassini serve: kube: topology: {type(e).__name__}: {e}; keeping "
                         "the previous model")

    # nodes
    def _nodes_listed(self, objects: dict[str, dict[str, Any]]) -> None:
        from cassini.service.kube.client import RequestFailed

        try:
            self.source = self._discover()
            self.source_error = None
        except InputError as e:
            self.source_error = str(e)
            self.log(f"cassini serve: kube: {e}" + ("; keeping the previous topology"
                                                    if self.source is not None else ""))
        except RequestFailed as e:
            if self.source is None:  # nothing to go on: the list is retried (back-off)
                raise
            self.log(f"cassini serve: kube: topology: {e}; keeping the previous topology")
        nodes = {}
        for name, obj in objects.items():
            try:
                nodes[name] = KubeNode.from_object(obj, f"node {name}")
            except InputError as e:
                self.log(f"cassini serve: kube: {e}; node ignored")
        with self._lock:
            self.nodes = nodes
            self._listed.add("nodes")
            self._rebuild()

    def _node_event(self, kind: str, name: str, obj: dict[str, Any]) -> None:
        with self._lock:
            if kind == "DELETED":
                if self.nodes.pop(name, None) is not None:
                    self._rebuild()
                return
            try:
                node = KubeNode.from_object(obj, f"node {name}")
            except InputError as e:
                self.log(f"cassini serve: kube: {e}; node ignored")
                return
            if self.nodes.get(name) != node:  # status-only updates change nothing here
                self.nodes[name] = node
                self._rebuild()
                if self.hierarchy is not None and name not in self.hierarchy.paths:
                    self._want_topology.set()  # a new HyperNode, Topology... may place it

    # pods
    def _pods_listed(self, objects: dict[str, dict[str, Any]]) -> None:
        pods = {k: p for k, p in ((k, job_pod(o)) for k, o in objects.items()) if p is not None}
        with self._lock:
            self.pods = pods
            self._listed.add("pods")
            self._rebuild()

    def _pod_event(self, kind: str, key: str, obj: dict[str, Any]) -> None:
        pod = None if kind == "DELETED" else job_pod(obj)
        with self._lock:
            if self.pods.get(key) == pod:
                return
            if pod is None:
                self.pods.pop(key, None)
            else:
                self.pods[key] = pod
            self._rebuild()

    # the model
    def _rebuild(self) -> None:
        if self.failed is not None or not self._ready():  # both first lists: no half model
            return
        if not self._build_model():
            return
        pod_jobs = jobs_from_pods(self.pods.values())
        self._report("problems", pod_jobs.problems, "job {} not registered: {}")
        self._report("conflicts", pod_jobs.conflicts, "job {} left out: {}")
        self._report("pod notes", pod_jobs.dropped, "job {}: {}")
        for job_id in sorted(set(self.jobs) - set(pod_jobs.jobs) - set(pod_jobs.conflicts)):
            self.log(f"cassini serve: kube: job {job_id} removed (its last pod ended)")
        for job_id, job in sorted(pod_jobs.jobs.items()):
            if job_id not in self.jobs:
                self.log(f"cassini serve: kube: job {job_id} registered on "
                         f"{', '.join(job.nodes)}")
        self.jobs = pod_jobs.jobs
        missing = {
            j.job_id: ", ".join(n for n in j.nodes if n not in self.cluster.nodes)
            for j in self.jobs.values()
            if any(n not in self.cluster.nodes for n in j.nodes)
        }
        self._report("missing", missing,
                     "job {} runs on nodes no longer in the model (kept; its other nodes "
                     "count): {}")
        self.apply(self.cluster, list(self.jobs.values()), dict(pod_jobs.conflicts))
        self.synced.set()

    def _build_model(self) -> bool:
        """Build the model from the nodes and the topology source; False when the
        service must stop (the first model cannot be built, or holds no node: fatal)."""
        first = self.hierarchy is None
        nodes = list(self.nodes.values())
        if self.source is None:
            if first:
                self._fail(f"no node in the model: {self.source_error or 'no topology'}")
                return False
            return True
        try:
            hierarchy = self.source.hierarchy(nodes)
            built = build_cluster(nodes, hierarchy, self.options.links)
        except InputError as e:
            if first:
                oversubscription = e.field == "oversubscription"
                self._fail(f"--oversubscription: {e.problem}" if oversubscription
                           else f"no node in the model: {e}")  # fmt: skip
                return False
            self.log(f"cassini serve: kube: topology: {e}; keeping the previous model")
            return True
        tiers = ", ".join(hierarchy.tiers) or "(none)"
        self._report("source", {"topology": f"{hierarchy.source}; tiers (top first): {tiers}"},
                     "{}: {}")
        self._report("left out", built.left_out, "node {} left out of the model: {}")
        self._report("notes", built.notes, "{}: {}")
        if first and not built.cluster.nodes:
            why = (f"all {len(built.left_out)} nodes left out (logged above)" if built.left_out
                   else "the API server lists no node")
            self._fail(f"no node in the model: {why}")
            return False
        self.cluster, self.hierarchy = built.cluster, hierarchy
        return True

    def _fail(self, line: str) -> None:
        """Stop for good: the watches end, nothing is applied; ``fatal(line)`` (without
        one, the line is logged)."""
        self.failed = line
        for w in self.watches:
            w.stopping.set()
        if self.fatal is not None:
            self.fatal(line)
        else:
            self.log(f"cassini serve: kube: {line}; stopped (no model served)")

    def _ready(self) -> bool:
        return self._listed == {"nodes", "pods"}

    def _report(self, what: str, now: dict[str, str], line: str) -> None:
        """Log the entries of ``now`` that are new or changed since the last report."""
        before = self._reported.get(what, {})
        for k in sorted(now):
            if before.get(k) != now[k]:
                self.log("cassini serve: kube: " + line.format(k, now[k]))
        self._reported[what] = dict(now)
