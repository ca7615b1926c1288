"""The cluster ``cassini serve --cluster FILE`` knows (:class:`ClusterNetwork`: links, the
links a job on each node sends through, the epoch) and its running jobs
(:class:`RunningJob`), read from the file or from a request body.  The computations on
them live in :mod:`cassini.service.scoring` and :mod:`cassini.service.shifts`.

Cluster file (YAML or JSON)::

    epoch_s: 1767225600.0        # optional: UNIX time every job's slots count from
    links:                       # every link, capacity in bits/s
      - {id: tor0-up, capacity_bps: 4.0e+11}
      - {id: srv0.0-up, capacity_bps: 1.0e+11}
    nodes:                       # node name -> links a job on it sends through
      gpu-0-0: [srv0.0-up, srv0.0-down, tor0-up, tor0-down]
    jobs:                        # running jobs (also POST /v1/jobs at run time)
      - {id: bert-a, model: bert, nodes: [gpu-0-0, gpu-0-1]}
      - {id: mine, iteration_time_s: 0.2,
         phases: [{start_s: 0.1, duration_s: 0.1, rate_bps: 4.0e+10}], nodes: [gpu-0-2]}

A job on two or more nodes crosses the links of all its nodes; a job on one node crosses
no link (:meth:`cassini.service.scoring.State.job_links`).  ``model`` names a profile of
the library (``cassini/data/profiles.json``); otherwise the job carries its own profile.
The file is read with :func:`cassini.files.parse_yaml` (a ``.json`` file that is JSON with
:func:`cassini.files.loads_json`): a key given twice is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from cassini import schema
from cassini.agent import epoch_problem
from cassini.errors import InputError
from cassini.profile import JobProfile, library_model

#: Extender score of a node the service cannot judge (unknown node, pod without a profile,
#: server without a cluster): the middle of kube-scheduler's 0..10, the same for every node.
NEUTRAL_SCORE = 5
MAX_SCORE = 10
#: A running job's fields: ``provenance`` (an object saying where the numbers come from,
#: as ``cassini profile --nic-bps`` writes it) is read as every JOB reader reads it
#: (:meth:`cassini.profile.JobProfile.from_dict`): checked to be an object, not kept.
JOB_FIELDS = ("id", "nodes", "model", "iteration_time_s", "phases", "provenance")


@lru_cache(maxsize=1)
def library() -> dict[str, JobProfile]:
    """The shipped profile library: id -> profile."""
    text = resources.files("cassini").joinpath("data/profiles.json").read_text()
    return {p["id"]: JobProfile.from_dict(p, f"library[{p['id']}]") for p in json.loads(text)}


@dataclass(frozen=True)
class RunningJob:
    """A running job: its profile and the nodes it runs on."""

    profile: JobProfile
    nodes: tuple[str, ...]
    model: str | None = None

    @property
    def job_id(self) -> str:
        return self.profile.job_id

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.job_id, "nodes": list(self.nodes)}
        if self.model is not None:
            out["model"] = self.model
        out["iteration_time_s"] = self.profile.iteration_time_s
        out["phases"] = [p.to_dict() for p in self.profile.phases]
        return out


#: The time-shift endpoint's last path segment: a job id ending in it could not be read
#: back (``/v1/jobs/<id>`` would name another job's time-shift), so a new job's may not
#: (rows stored before this rule are read as before).
TIME_SHIFT_PATH = "/time_shift"
#: The longest job id (characters) a new job may have: Kubernetes' longest object name.
#: Percent-encoded, the longest path stays far below what HTTP servers accept in a
#: request line (a 70,000-character id could be registered but never read or deleted).
MAX_JOB_ID_CHARS = 253
#: a path ending in a newline must never name the job without it
CONTROL_CHARS = schema.CONTROL_CHARS


def unroutable(job_id: str) -> str | None:
    """Why the job routes could not name ``job_id`` (a control character, longer than
    :data:`MAX_JOB_ID_CHARS`, or ending in TIME_SHIFT_PATH); None if they can.  The one
    rule for new ids (request bodies and cluster files); stored rows are not checked."""
    if len(job_id) > MAX_JOB_ID_CHARS:
        return f"must be at most {MAX_JOB_ID_CHARS} characters, got {len(job_id)}"
    bad = CONTROL_CHARS.search(job_id)
    if bad is not None:
        return (
            f"must not contain control characters, got {bad.group()!r} at character {bad.start()}"
        )
    if not job_id.endswith(TIME_SHIFT_PATH):
        return None
    return (
        f"must not end in {TIME_SHIFT_PATH!r}: /v1/jobs/{job_id} is the time-shift path of "
        f"job {job_id.removesuffix(TIME_SHIFT_PATH)!r}"
    )


def check_routable(job_id: str, field: str) -> None:
    """InputError naming ``field`` when the job routes could not name ``job_id``."""
    problem = unroutable(job_id)
    if problem is not None:
        raise InputError(field, problem)


def read_job(obj: Any, field: str = "", *, job_id: str | None = None) -> RunningJob:
    """A running job from JSON: ``{"id", "nodes", "model"}`` or ``{"id", "nodes",
    "iteration_time_s", "phases"}`` (the JOB of ``cassini advise`` plus its nodes), either
    with an optional ``provenance`` object (see :data:`JOB_FIELDS`)."""
    obj = schema.require_object(obj, field)
    schema.check_fields(obj, field, (), JOB_FIELDS)
    if "provenance" in obj:
        schema.require_object(obj["provenance"], schema.join(field, "provenance"))
    if "id" not in obj and job_id is None:
        raise InputError(schema.join(field, "id"), "missing required field")
    jid = schema.identifier(obj.get("id", job_id), schema.join(field, "id"))
    nodes_raw = schema.array(obj.get("nodes", []), schema.join(field, "nodes"))
    nodes = tuple(
        schema.identifier(n, f"{schema.join(field, 'nodes')}[{i}]") for i, n in enumerate(nodes_raw)
    )
    if len(set(nodes)) != len(nodes):
        raise InputError(schema.join(field, "nodes"), "names a node more than once")
    profile, model = profile_and_model(obj, field, jid)
    return RunningJob(profile, nodes, model)


def profile_of(obj: Mapping[str, Any], field: str, job_id: str) -> JobProfile:
    """The profile a job object gives: ``model`` (library id) or its own
    ``iteration_time_s`` and ``phases``."""
    return profile_and_model(obj, field, job_id)[0]


def profile_and_model(
    obj: Mapping[str, Any], field: str, job_id: str
) -> tuple[JobProfile, str | None]:
    """:func:`profile_of`, and the library id its ``model`` names (None without one)."""
    has_own = "iteration_time_s" in obj or "phases" in obj
    if "model" in obj:
        if has_own:
            raise InputError(
                schema.join(field, "model"), "give a model or iteration_time_s/phases, not both"
            )
        model = schema.identifier(obj["model"], schema.join(field, "model"))
        known = library()
        model = library_model(model, known, schema.join(field, "model"))
        base = known[model]
        return JobProfile(job_id, base.iteration_time_s, base.phases), model
    for name in ("iteration_time_s", "phases"):
        if name not in obj:
            raise InputError(
                schema.join(field, name), "missing required field (or give a library model)"
            )
    mine = {"id": job_id, "iteration_time_s": obj["iteration_time_s"], "phases": obj["phases"]}
    try:
        return JobProfile.from_dict(mine, field or "job"), None
    except InputError as e:
        if field:
            raise
        raise InputError(e.field.removeprefix("job."), e.problem) from None


@dataclass(frozen=True)
class ClusterNetwork:
    """The network the service places on: links (id -> capacity, bits/s), node -> links,
    and the epoch (UNIX seconds) of the slot grid, or None for the server's start time."""

    links: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    epoch_s: float | None = None


def read_cluster(obj: Any, field: str = "") -> tuple[ClusterNetwork, list[RunningJob]]:
    """A cluster file's content: the cluster and its running jobs."""
    obj = schema.require_object(obj, field)
    schema.check_fields(obj, field, ("links", "nodes"), ("jobs", "epoch_s"))
    links: dict[str, float] = {}
    for i, raw in enumerate(schema.array(obj["links"], schema.join(field, "links"))):
        f = f"{schema.join(field, 'links')}[{i}]"
        raw = schema.require_object(raw, f)
        schema.check_fields(raw, f, ("id", "capacity_bps"))
        lid = schema.identifier(raw["id"], f"{f}.id")
        if lid in links:
            raise InputError(f"{f}.id", f"duplicate link id {lid!r}")
        links[lid] = schema.number(raw["capacity_bps"], f"{f}.capacity_bps", positive=True)
    nodes: dict[str, tuple[str, ...]] = {}
    nf = schema.join(field, "nodes")
    for name, raw in schema.require_object(obj["nodes"], nf).items():
        f = f"{nf}.{name}"
        path = []
        for k, lid in enumerate(schema.array(raw, f)):
            lid = schema.identifier(lid, f"{f}[{k}]")
            if lid not in links:
                raise InputError(f"{f}[{k}]", f"unknown link {lid!r} (not in links)")
            path.append(lid)
        nodes[str(name)] = tuple(dict.fromkeys(path))
    epoch = None
    if obj.get("epoch_s") is not None:
        epoch = schema.number(obj["epoch_s"], schema.join(field, "epoch_s"), non_negative=True)
        problem = epoch_problem(epoch)
        if problem is not None:
            raise InputError(schema.join(field, "epoch_s"), problem)
    cluster = ClusterNetwork(links, nodes, epoch)
    jobs: list[RunningJob] = []
    seen: set[str] = set()
    jf = schema.join(field, "jobs")
    for i, raw in enumerate(schema.array(obj.get("jobs") or [], jf)):
        job = read_job(raw, f"{jf}[{i}]")
        check_routable(job.job_id, f"{jf}[{i}].id")
        if job.job_id in seen:
            raise InputError(f"{jf}[{i}].id", f"duplicate job id {job.job_id!r}")
        check_nodes(cluster, job, f"{jf}[{i}]")
        seen.add(job.job_id)
        jobs.append(job)
    return cluster, jobs


def load_cluster_file(path: str | Path) -> tuple[ClusterNetwork, list[RunningJob]]:
    """Read a cluster file (YAML or JSON) with the shared readers of :mod:`cassini.files`;
    every problem is an InputError whose message starts with the file's name, once.

    A file named ``*.json`` that is JSON is read as JSON (:func:`~cassini.files.loads_json`,
    as sim configs): ``1e9`` is a number, and ``NaN`` or ``Infinity`` is told it is not
    finite (YAML read them as the strings 'NaN' and '1e9').  Anything else is read as YAML
    (:func:`~cassini.files.parse_yaml`; JSON is YAML, and a ``.json`` file may hold the
    YAML ``cassini cluster from-kube --out`` writes): a syntax error, or a key given twice
    in one mapping (a node listed twice would silently keep the last), names its line and
    column, in a ``.json`` file too.  ``-`` is standard input, read as a ``.json`` file is
    and named ``<stdin>``."""
    from cassini import files

    try:
        return read_cluster(_parse_cluster_file(path))
    except InputError as e:
        raise e.in_file(files.input_name(path)) from None


def _parse_cluster_file(path: str | Path) -> Any:
    """The document in a cluster file (see :func:`load_cluster_file`)."""
    from cassini import files

    name = files.input_name(path)
    text = files.read_input(path)
    if name.endswith(".json") or str(path) == files.STDIN:
        try:
            return files.loads_json(text)
        except ValueError:  # (too deep a document is files.TooDeep, a ValueError)
            pass  # YAML, or an error the YAML reader names with its line and column
    return files.parse_yaml(text, name)  # every problem an InputError naming the file


def check_nodes(cluster: ClusterNetwork, job: RunningJob, field: str) -> None:
    for i, node in enumerate(job.nodes):
        if node not in cluster.nodes:
            raise InputError(
                f"{schema.join(field, 'nodes')}[{i}]", f"unknown node {node!r} (not in the cluster)"
            )
