"""The options of ``cassini serve``: defaults, help text and argparse definitions.

Standard library only, so that ``cassini --help`` does not pay for the HTTP stack."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

from cassini.circle import n_angles
from cassini.errors import InputError
from cassini.files import (
    MAX_WORKERS,
    input_file,
    int_in,
    output_path,
    positive_float,
    positive_int,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_READ_TIMEOUT_S = 30.0
DEFAULT_KEEP_ALIVE_S = 75.0
DEFAULT_GRACE_S = 60.0
DEFAULT_MAX_JOBS = 10_000
DEFAULT_WRITE_RATE = 50.0


def default_state_path() -> str:
    """``$XDG_STATE_HOME/cassini/serve.sqlite`` (``~/.local/state/...`` without it)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "cassini", "serve.sqlite")


DESCRIPTION = "serve the advisor over HTTP (JSON), with a kube-scheduler extender"

EPILOG = """\
endpoints (OpenAPI document: GET /openapi.json, docs/openapi.json):
  POST /v1/advise   body as 'cassini advise' reads; answer as it prints (JSON).
                    query options: precision_deg (default 5), aggregate=mean|min,
                    loops=reject|score.  All candidates rejected is still 200,
                    with "best": null.
  POST /v1/score    body as 'cassini score' reads; query option: precision_deg.
  GET|POST /v1/jobs, GET|DELETE /v1/jobs/{id}
                    running jobs: {"id", "nodes": [...], "model": LIBRARY_ID} or
                    {"id", "nodes", "iteration_time_s", "phases"}
  GET|PUT /v1/jobs/{id}/time_shift
                    {"job_id", "shift", "shift_s", "period_s", "epoch_s", "reason",
                    "tolerance_s", "released"}: slot k of the job starts at
                    epoch_s + shift_s + k * period_s (epoch_s: UNIX seconds < 1e10)
  POST /k8s/v1/prioritize, /k8s/v1/filter
                    kube-scheduler extender (urlPrefix http://HOST:PORT/k8s/v1);
                    pod annotations cassini.io/job, cassini.io/profile (JOB JSON)
                    or cassini.io/model (library id)
  GET  /healthz (liveness), /readyz (readiness: 503 under --kube until its first
                    cluster model), /metrics (Prometheus text), /openapi.json
POST/PUT bodies need Content-Type: application/json.
writes (POST/PUT/DELETE under /v1/jobs) need 'Authorization: Bearer TOKEN' with a
token of --token-file (lines 'TOKEN NAME'); without --token-file they are refused
unless --insecure-writes.  Every write is a JSON line of the audit log.
errors are JSON {"error": {"code", "field", "message"}}: 400 bad JSON, schema or
option; 401 no or unknown token; 403 writes disabled; 404 unknown path or job; 405
wrong method; 408 body too slow; 413 body over --max-body-bytes; 415 wrong
Content-Type; 429 over --write-rate or --max-jobs; 503 no worker free within
--timeout-s, or shutting down (any request; retry after Retry-After once the service
is back); 504 computation over --timeout-s (its worker process is killed and replaced).

state (--state, SQLite; default ~/.local/state/cassini/serve.sqlite): the jobs
registered over HTTP, the shifts set by PUT and the epoch survive a restart;
--state :memory: keeps them in memory only.

cluster file (--cluster, YAML or JSON; reloaded on SIGHUP):
  links: [{id: tor0-up, capacity_bps: 4.0e+11}, ...]
  nodes: {gpu-0-0: [srv0.0-up, srv0.0-down, tor0-up, tor0-down], ...}
  jobs:  [{id: bert-a, model: bert, nodes: [gpu-0-0, gpu-0-1]}, ...]   (optional)
  epoch_s: 1767225600.0                                                  (optional)

or --kube (the [kube] extra): the cluster from the API server's Nodes and a Kueue
  Topology, Volcano HyperNodes or --topology-labels (else the nodes' region/zone labels;
  no node in the first model: exit 2); the running jobs from Pods with cassini.io/job;
  both kept up to date by watches ('cassini cluster --help', docs/service.md).

example:
  cassini serve --port 8080 --cluster deploy/cluster-example.yaml &
  curl -sS -H 'Content-Type: application/json' \\
    --data-binary @cassini/data/example_advise.json \\
    'http://127.0.0.1:8080/v1/advise?aggregate=min&precision_deg=2'
  curl -sS http://127.0.0.1:8080/v1/jobs/bert-b/time_shift
  kill -HUP %1      # re-read the cluster file

stops gracefully on SIGINT or SIGTERM: requests in flight finish, new ones get 503,
then it exits.  exit status: 0 after a graceful stop, 1 if it cannot listen, 2 on bad
options, a bad cluster file, token file or state file.
"""


#: argparse ``type`` of the counts and seconds (cassini.files' checks, as every command's)
_workers = int_in(1, MAX_WORKERS)
_port = int_in(0, 65535)


def _parsed(text: str, ok: Callable[[float], bool], need: str) -> float:
    """``float(text)`` for an option with a range cassini.files has no check of, refused
    (ArgumentTypeError) unless ``ok``; ``need`` names the range in the messages."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {need}, got {text}")
    return value


def _unit_interval(text: str) -> float:
    return _parsed(text, lambda v: 0.0 <= v <= 1.0, "in [0, 1]")


def _non_negative(text: str) -> float:
    return _parsed(text, lambda v: 0 <= v < math.inf, "a finite number >= 0")


def _precision(text: str) -> float:
    """The advisor's bound, as the HTTP query and ``cassini advise`` read it."""
    value = positive_float(text)
    try:
        n_angles(value)
    except InputError as e:
        raise argparse.ArgumentTypeError(e.problem) from None
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``cassini serve`` options."""
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; 0.0.0.0 exposes it to the "
        "network: reads are open to anyone who reaches it, writes need --token-file)",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one, printed at start)",
    )
    parser.add_argument(
        "--cluster",
        metavar="FILE",
        type=input_file,
        default=None,
        help="cluster file (YAML/JSON): links, node -> links, running jobs; re-read on SIGHUP",
    )
    parser.add_argument(
        "--min-score",
        type=_unit_interval,
        default=0.0,
        metavar="X",
        help="the extender's filter drops nodes whose compatibility (0..1) is below X "
        "(default 0: drops none)",
    )
    parser.add_argument(
        "--precision-deg",
        type=_precision,
        default=5.0,
        metavar="DEG",
        help="angle step for the extender's scores and the jobs' time-shifts (default 5)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help=f"larger request bodies get 413 (default {DEFAULT_MAX_BODY_BYTES} = 1 MiB)",
    )
    parser.add_argument(
        "--timeout-s",
        type=positive_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"time limit per request, waiting for a worker included (default "
        f"{DEFAULT_TIMEOUT_S:g}); past it 503 (still waiting) or 504 (computing)",
    )
    parser.add_argument(
        "--keep-alive-s",
        type=positive_float,
        default=DEFAULT_KEEP_ALIVE_S,
        metavar="S",
        help=f"idle keep-alive connections are closed after S seconds (default "
        f"{DEFAULT_KEEP_ALIVE_S:g})",
    )
    parser.add_argument(
        "--workers",
        type=_workers,
        default=None,
        metavar="N",
        help=f"worker processes = requests computed at once, 1..{MAX_WORKERS} (default: "
        "min(4, CPUs))",
    )
    parser.add_argument("--quiet", action="store_true", help="no log line per request")
    _add_safety_arguments(parser)
    _add_kube_arguments(parser)


def _add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    """``--kube`` and its options (docs/service.md, "Kubernetes without a cluster file")."""
    from cassini.service.kube.cli import add_kube_arguments

    group = parser.add_argument_group("the cluster from Kubernetes (instead of --cluster)")
    group.add_argument(
        "--kube",
        action="store_true",
        help="build the cluster from the API server's Nodes and topology objects and the "
        "running jobs from Pods carrying cassini.io/job, kept up to date by watches",
    )
    add_kube_arguments(group)  # type: ignore[arg-type]
    group.add_argument(
        "--publish-network-topology",
        metavar="[NAMESPACE/]NAME",
        default=None,
        help="with --kube: keep the 'cassini' weights of this scheduler-plugins "
        "NetworkTopology up to date (namespace default: default)",
    )
    group.add_argument(
        "--publish-interval-s",
        type=positive_float,
        default=None,
        metavar="S",
        help="with --publish-network-topology: publish it at most every S seconds "
        "(default 30)",
    )


def _add_safety_arguments(parser: argparse.ArgumentParser) -> None:
    """State, writers, TLS, limits, audit."""
    parser.add_argument(
        "--state",
        metavar="PATH",
        type=input_file,
        default=None,
        help="SQLite file keeping registered jobs, shifts and the epoch across restarts; "
        "its parent folder is made if missing "
        "(default ~/.local/state/cassini/serve.sqlite; ':memory:' keeps nothing)",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        type=input_file,
        default=None,
        help="bearer tokens allowed to write, one 'TOKEN [NAME]' per line",
    )
    parser.add_argument(
        "--token-review",
        metavar="URL",
        default=None,
        help="also accept Kubernetes ServiceAccount tokens: the API server's TokenReview URL "
        "(https://APISERVER/apis/authentication.k8s.io/v1/tokenreviews); needs "
        "--token-review-user",
    )
    parser.add_argument(
        "--token-review-user",
        metavar="USER",
        action="append",
        default=[],
        help="a user whose reviewed token may write, e.g. "
        "system:serviceaccount:NAMESPACE:NAME (repeatable)",
    )
    parser.add_argument(
        "--token-review-ca",
        metavar="PEM",
        type=input_file,
        default="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        help="the API server's CA for --token-review (default: the pod's ServiceAccount CA)",
    )
    parser.add_argument(
        "--insecure-writes",
        action="store_true",
        help="without --token-file, let anyone who reaches the port write",
    )
    parser.add_argument(
        "--tls-cert", metavar="PEM", type=input_file, default=None, help="serve HTTPS: certificate"
    )
    parser.add_argument(
        "--tls-key", metavar="PEM", type=input_file, default=None, help="serve HTTPS: its key"
    )
    parser.add_argument(
        "--max-jobs",
        type=positive_int,
        default=DEFAULT_MAX_JOBS,
        metavar="N",
        help=f"running jobs the registry holds at most; more get 429 (default {DEFAULT_MAX_JOBS})",
    )
    parser.add_argument(
        "--write-rate",
        type=_non_negative,
        default=DEFAULT_WRITE_RATE,
        metavar="N",
        help=f"writes per second per client (token name, else address), bursts of 2N; more "
        f"get 429 (default {DEFAULT_WRITE_RATE:g}; 0: no limit)",
    )
    parser.add_argument(
        "--audit-log",
        metavar="FILE",
        type=output_path,
        default=None,
        help="append one JSON line per write here (default: standard error); its "
        "directory must exist",
    )
