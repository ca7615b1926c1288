"""The Kubernetes scheduler extender's wire format (``k8s.io/kube-scheduler/extender/v1``).

kube-scheduler POSTs ``ExtenderArgs`` to ``urlPrefix + "/" + verb`` and reads the answer
with Go's ``encoding/json``.  The Go types have no json tags, so the field names on the
wire are the capitalised Go names (``Pod``, ``Nodes``, ``NodeNames``, ``Host``, ``Score``,
``FailedNodes``...); Go's decoder matches names case-insensitively, and so does
:func:`read_extender_args`.  ``Pod`` and the ``Nodes`` items are Kubernetes objects with
json tags (``metadata.name``, ``metadata.annotations``).

Pod annotations read:

``cassini.io/job``      the job the pod belongs to (its id in ``/v1/jobs``); a pod label
                        of that name when the annotation is absent (:func:`pod_job_id`)
``cassini.io/profile``  the job's profile, a JOB object as in ``cassini advise`` (JSON)
``cassini.io/model``    or a profile library id (``cassini/data/profiles.json``)

Without a profile or model annotation the job's registered profile is used; a pod with
none of them gets :data:`NEUTRAL_SCORE` on every node.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cassini import files, schema
from cassini.errors import InputError
from cassini.profile import JobProfile
from cassini.service import models
from cassini.service.cluster import MAX_SCORE, NEUTRAL_SCORE, RunningJob, profile_of
from cassini.service.errors import BadRequest

ANNOTATION_JOB = "cassini.io/job"
ANNOTATION_PROFILE = "cassini.io/profile"
ANNOTATION_MODEL = "cassini.io/model"

__all__ = [
    "ANNOTATION_JOB",
    "ANNOTATION_MODEL",
    "ANNOTATION_PROFILE",
    "MAX_SCORE",
    "NEUTRAL_SCORE",
    "ExtenderArgs",
    "filter_result",
    "pod_job_id",
    "pod_profile",
    "priority_list",
    "read_extender_args",
]


@dataclass(frozen=True)
class ExtenderArgs:
    """What the extender needs of a request: the pod's name and annotations, the candidate
    node names, the node objects when they came as ``Nodes`` (not ``NodeNames``), and the
    pod's labels (for :func:`pod_job_id`)."""

    pod_name: str
    annotations: dict[str, str]
    node_names: tuple[str, ...]
    node_items: tuple[Any, ...] | None  # None: the request used NodeNames
    labels: dict[str, str] = field(default_factory=dict)


def pod_job_id(annotations: Mapping[str, Any], labels: Mapping[str, Any]) -> str | None:
    """The job a pod belongs to: its ``cassini.io/job`` annotation, else (absent or
    empty) its label of that name; None when neither names one.  The one rule of the
    extender (:func:`pod_profile`) and the pod sync (``kube/pods.py``)."""
    for where in (annotations, labels):
        value = where.get(ANNOTATION_JOB)
        if value:
            return str(value)
    return None


def get_ci(obj: Mapping[str, Any], name: str) -> tuple[str, Any]:
    """``(key, value)`` of a field matched as Go's decoder does: the exact name first,
    then any key equal to it ignoring case; ``(name, None)`` when absent."""
    if name in obj:
        return name, obj[name]
    folded = name.casefold()
    for key, value in obj.items():
        if isinstance(key, str) and key.casefold() == folded:
            return key, value
    return name, None


def read_extender_args(obj: Any) -> ExtenderArgs:
    """Read ``ExtenderArgs``; unknown fields are ignored (as Go ignores them)."""
    obj = schema.require_object(obj, "")
    pod_key, pod = get_ci(obj, "Pod")
    if pod is None:
        raise InputError(pod_key, "missing required field (the pod being scheduled)")
    pod = schema.require_object(pod, pod_key)
    meta_key, meta = get_ci(pod, "metadata")
    meta_field = f"{pod_key}.{meta_key}"
    meta = schema.require_object(meta if meta is not None else {}, meta_field)
    name_key, name = get_ci(meta, "name")
    pod_name = "" if name is None else _string(name, f"{meta_field}.{name_key}")
    annotations = _string_map(meta, "annotations", meta_field)
    labels = _string_map(meta, "labels", meta_field)

    names_key, names = get_ci(obj, "NodeNames")
    nodes_key, nodes = get_ci(obj, "Nodes")
    items: tuple[Any, ...] | None = None
    if names is not None:
        names = schema.array(names, names_key)
        if not all(type(n) is str for n in names):  # noqa: E721 - exact str, fast path
            for i, n in enumerate(names):
                _string(n, f"{names_key}[{i}]")
        node_names = tuple(names)
    elif nodes is not None:
        nodes = schema.require_object(nodes, nodes_key)
        items_key, raw = get_ci(nodes, "items")
        items_field = f"{nodes_key}.{items_key}"
        items = tuple(schema.array(raw if raw is not None else [], items_field))
        found = []
        for i, node in enumerate(items):
            f = f"{items_field}[{i}]"
            node = schema.require_object(node, f)
            mk, m = get_ci(node, "metadata")
            m = schema.require_object(m if m is not None else {}, f"{f}.{mk}")
            nk, n = get_ci(m, "name")
            if n is None:
                raise InputError(f"{f}.{mk}.{nk}", "missing required field (the node's name)")
            found.append(_string(n, f"{f}.{mk}.{nk}"))
        node_names = tuple(found)
    else:
        node_names = ()
    return ExtenderArgs(pod_name, annotations, node_names, items, labels)


def _string_map(meta: Mapping[str, Any], name: str, meta_field: str) -> dict[str, str]:
    """The pod's ``metadata.<name>`` (annotations, labels): strings to strings."""
    key, value = get_ci(meta, name)
    where = f"{meta_field}.{key}"
    out = {}
    for k, v in schema.require_object(value if value is not None else {}, where).items():
        out[str(k)] = _string(v, f'{where}["{k}"]')
    return out


def pod_profile(args: ExtenderArgs, running: Mapping[str, RunningJob]) -> JobProfile | None:
    """The pod's job's profile from its annotations, or its registered job's profile;
    None when the pod says nothing about its job (neutral scores)."""
    ann = args.annotations
    field = 'Pod.metadata.annotations["{}"]'
    job_id = pod_job_id(ann, args.labels)
    if job_id is None and ANNOTATION_JOB in ann:  # empty, and no label to fall back on
        raise InputError(field.format(ANNOTATION_JOB), "must not be empty")
    if ANNOTATION_PROFILE in ann:
        if ANNOTATION_MODEL in ann:
            raise InputError(
                field.format(ANNOTATION_MODEL), f"give {ANNOTATION_PROFILE} or this, not both"
            )
        f = field.format(ANNOTATION_PROFILE)
        obj = _profile_object(ann[ANNOTATION_PROFILE], f)
        # id and provenance optional, as a JOB file has them (`cassini profile --nic-bps`
        # writes provenance); provenance is read as a request body's job reads it: an object
        schema.check_fields(obj, f, ("iteration_time_s", "phases"), ("id", "provenance"))
        if "provenance" in obj:
            schema.require_object(obj["provenance"], f"{f}.provenance")
        try:  # the bounds a request body's job has (a 1 ns iteration would never finish)
            models.validate(models.ProfileAnnotation, obj, f)
        except BadRequest as e:
            raise InputError(e.field or f, e.message) from None
        own = schema.identifier(obj["id"], f"{f}.id") if "id" in obj else None
        return profile_of(obj, f, job_id or own or args.pod_name or "pod")
    if ANNOTATION_MODEL in ann:
        try:
            jid = job_id or args.pod_name or "pod"
            return profile_of({"model": ann[ANNOTATION_MODEL]}, "", jid)
        except InputError as e:
            raise InputError(field.format(ANNOTATION_MODEL), e.problem) from None
    if job_id is not None and job_id in running:
        return running[job_id].profile
    return None


#: a bare word, as a library model's name is (``bert``, ``gpt-2``)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_MODEL_HINT = (
    f"a library model's name goes in {ANNOTATION_MODEL} ({ANNOTATION_PROFILE} takes a JOB "
    "object, JSON)"
)


def _profile_object(text: str, field: str) -> dict[str, Any]:
    """The ``cassini.io/profile`` annotation's JSON object; InputError naming ``field``,
    saying where a library model's name goes when one was given here (a bare word, a
    JSON string, an object with ``model``)."""
    try:
        obj = _annotation_json(text, field)
    except InputError:
        word = text.strip().removeprefix("\ufeff")
        if _WORD.fullmatch(word):
            raise InputError(field, f"not JSON but the word {word!r}: {_MODEL_HINT}") from None
        raise
    if isinstance(obj, str):
        raise InputError(field, f"a JSON string ({obj!r}), not a JOB object: {_MODEL_HINT}")
    obj = schema.require_object(obj, field)
    if "model" in obj:
        raise InputError(schema.join(field, "model"), f"not read here: {_MODEL_HINT}")
    return obj


def _annotation_json(text: str, field: str) -> Any:
    """The JSON of an annotation, read as a request body is (:func:`files.loads_json`): a
    leading byte-order mark dropped, a key given twice refused, and too-deep nesting or
    a too-long integer said in the reader's words; InputError naming ``field``."""
    try:
        return files.loads_json(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as e:
        raise InputError(field, f"malformed JSON at column {e.colno}: {e.msg}") from None
    except ValueError as e:  # DuplicateKey, TooDeep, NumberTooLong
        raise InputError(field, f"malformed JSON: {e}") from None


Score = tuple[str, float | None, int, str | None, Sequence[str]]


def priority_list(scores: Sequence[Score]) -> list[dict[str, Any]]:
    """``HostPriorityList``: ``[{"Host": node, "Score": 0..10}, ...]``."""
    return [{"Host": node, "Score": int(ext)} for node, _, ext, _, _ in scores]


def filter_result(args: ExtenderArgs, scores: Sequence[Score], min_score: float) -> dict[str, Any]:
    """``ExtenderFilterResult``: the nodes whose score is at least ``min_score`` (in
    [0, 1]; nodes not judged always pass), in the form the request used."""
    passed, failed = [], {}
    for node, score, _, worst, jobs in scores:
        if score is not None and score < min_score:
            with_ = f" (link {worst} shared with {', '.join(jobs)})" if worst else ""
            failed[node] = (
                f"cassini: compatibility {score:.3f} below --min-score {min_score:g}{with_}"
            )
        else:
            passed.append(node)
    result: dict[str, Any] = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    if args.node_items is None:
        result["NodeNames"] = passed
    else:
        keep = set(passed)
        pairs = zip(args.node_items, args.node_names, strict=True)
        result["Nodes"] = {"items": [it for it, n in pairs if n in keep]}
    return result


def _string(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise InputError(field, f"must be a string, got {schema.kind_of(value)}")
    return value
