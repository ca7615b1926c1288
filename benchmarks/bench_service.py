#!/usr/bin/env python3
"""Benchmark: ``cassini serve`` under N concurrent keep-alive clients on loopback.

Starts the real CLI (``cassini serve --cluster FILE``) in a subprocess, with a synthetic
cluster of 1,000 nodes (125 racks x 8 nodes; each node a 100 Gb/s NIC up and down, each
rack a 400 Gb/s uplink and downlink) and 200 running jobs drawn from the profile library
(iteration times jittered +-15 %, 1-8 whole nodes each, consecutive nodes from a random
start, so jobs spanning racks share rack links).  Then, for 1, 4, 16 and 64 concurrent
clients, each for ``--seconds``:

- ``POST /v1/advise`` with the built-in example request (``cassini advise --example``);
- ``POST /k8s/v1/prioritize`` with kube-scheduler's request for a pod annotated with a
  library model, all 1,000 node names (``nodeCacheCapable``), the pod's model cycling
  through ``--models`` profiles;
- writes: each client registers a new job (``POST /v1/jobs``), sets its shift (``PUT``)
  and removes it (``DELETE``), in a loop, with a bearer token.

The server runs as deployed: SQLite state in a file (``--state``, WAL, ``synchronous=FULL``:
one fsync per write), writes authenticated (``--token-file``), audit log to a file; the
write rate limit is off (``--write-rate 0``) so that the figure is the store's, not the
limit's.

Clients run in one separate process (asyncio, one keep-alive connection each); a request's
latency is from writing it to reading the whole answer.  Errors are answers other than 200
and broken connections.  Beside it, in this process and the same run, the same
computations are timed called directly (no HTTP, no worker process): the advisor on the
example request, and the node scores (warm link cache) for the prioritize request.

The first prioritize request for a model computes the link scores it needs in each worker
("cold"); that time is reported separately, and every model is sent to every worker before
the measured runs.

    .venv/bin/python benchmarks/bench_service.py [--seconds 5] [--clients 1 4 16 64] [--workers 2]

Progress goes to stderr, one line per stage; stdout carries only the figures (``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np

from cassini.files import non_negative_int, positive_float, positive_int

RACKS, NODES_PER_RACK = 125, 8
NIC_BPS, UPLINK_BPS = 100e9, 400e9


def make_cluster(n_jobs: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    library = json.loads(resources.files("cassini").joinpath("data/profiles.json").read_text())
    links, nodes = [], {}
    for r in range(RACKS):
        links += [
            {"id": f"r{r}-up", "capacity_bps": UPLINK_BPS},
            {"id": f"r{r}-down", "capacity_bps": UPLINK_BPS},
        ]
        for s in range(NODES_PER_RACK):
            name = f"gpu-{r}-{s}"
            links += [
                {"id": f"{name}-up", "capacity_bps": NIC_BPS},
                {"id": f"{name}-down", "capacity_bps": NIC_BPS},
            ]
            nodes[name] = [f"{name}-up", f"{name}-down", f"r{r}-up", f"r{r}-down"]
    names = list(nodes)
    free = set(names)
    jobs = []
    for i in range(n_jobs):
        base = library[rng.integers(len(library))]
        f = float(rng.uniform(0.85, 1.15))
        phases = [
            {
                "start_s": p["start_s"] * f,
                "duration_s": p["duration_s"] * f,
                "rate_bps": p["rate_bps"],
            }
            for p in base["phases"]
        ]
        want = int(rng.choice([1, 2, 2, 4, 4, 8]))
        start = int(rng.integers(len(names)))
        chosen = []
        for k in range(len(names)):
            n = names[(start + k) % len(names)]
            if n in free:
                chosen.append(n)
                free.discard(n)
                if len(chosen) == want:
                    break
        jobs.append(
            {
                "id": f"{base['id']}-{i}",
                "iteration_time_s": base["iteration_time_s"] * f,
                "phases": phases,
                "nodes": chosen,
            }
        )
    return {"epoch_s": 1767225600.0, "links": links, "nodes": nodes, "jobs": jobs}


def prioritize_body(model: str, node_names: list[str]) -> dict:
    pod = {
        "metadata": {
            "name": f"{model}-worker-0",
            "namespace": "default",
            "annotations": {"cassini.io/model": model, "cassini.io/job": f"new-{model}"},
        },
        "spec": {"containers": [{"name": "train", "image": "train:latest"}]},
    }
    return {"Pod": pod, "Nodes": None, "NodeNames": node_names}


def http_request(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


# -- client process -------------------------------------------------------------------------


async def _one_client(port, requests, stop_at, latencies, errors, i):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    k = i
    try:
        while time.monotonic() < stop_at:
            req = requests[k % len(requests)]
            k += 1
            t0 = time.perf_counter()
            try:
                writer.write(req)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                errors.append("connection")
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                errors.append(status)
    finally:
        writer.close()


def write_requests(client: int, k: int) -> list[bytes]:
    """One write cycle of a client: register job, set its shift, remove it."""
    jid = f"bench-{client}-{k}"
    job = json.dumps({"id": jid, "iteration_time_s": 0.2,
                      "phases": [{"start_s": 0.0, "duration_s": 0.1, "rate_bps": 1e10}]})
    shift = json.dumps({"shift_s": 0.05, "period_s": 0.2})
    auth = f"Authorization: Bearer {TOKEN}\r\n"
    out = []
    for method, path, body in (("POST", "/v1/jobs", job),
                               ("PUT", f"/v1/jobs/{jid}/time_shift", shift),
                               ("DELETE", f"/v1/jobs/{jid}", "")):
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        out.append(head.encode() + body.encode())
    return out


async def _one_writer(port, stop_at, latencies, errors, i):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    k = 0
    try:
        while time.monotonic() < stop_at:
            for req in write_requests(i, k):
                t0 = time.perf_counter()
                writer.write(req)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - t0)
                if not 200 <= status < 300:
                    errors.append(status)
            k += 1
    finally:
        writer.close()


async def _load(port, requests, clients, seconds):
    latencies: list[float] = []
    errors: list = []
    stop_at = time.monotonic() + seconds
    t0 = time.monotonic()
    if requests == "writes":
        clients_ = [_one_writer(port, stop_at, latencies, errors, i) for i in range(clients)]
    else:
        clients_ = [_one_client(port, requests, stop_at, latencies, errors, i)
                    for i in range(clients)]
    await asyncio.gather(*clients_)
    return latencies, errors, time.monotonic() - t0


def _client_main(port, requests, clients, seconds, out):
    out.put(asyncio.run(_load(port, requests, clients, seconds)))


def load(port: int, requests: list[bytes] | str, clients: int, seconds: float) -> dict:
    """Figures of ``clients`` keep-alive clients sending ``requests`` (or ``"writes"``:
    write cycles) for ``seconds``."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_client_main, args=(port, requests, clients, seconds, q))
    p.start()
    latencies, errors, elapsed = q.get()
    p.join()
    lat = np.array(latencies) * 1e3
    return {
        "clients": clients,
        "requests": len(latencies),
        "req_per_s": len(latencies) / elapsed,
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
        "p99_ms": float(np.percentile(lat, 99)) if len(lat) else None,
        "errors": len(errors),
        "error_kinds": sorted({str(e) for e in errors}),
    }


def timed(fn, n: int) -> dict:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    ms = np.array(times) * 1e3
    return {
        "calls": n,
        "mean_ms": float(ms.mean()),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def send_once(port: int, req: bytes) -> tuple[int, float]:
    import socket

    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(req)
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += s.recv(65536)
    return int(head.split(b" ", 2)[1]), time.perf_counter() - t0


def library_models() -> list[str]:
    """The profile ids of the shipped library, in its order."""
    text = resources.files("cassini").joinpath("data/profiles.json").read_text()
    return [m["id"] for m in json.loads(text)]


def model_count(text: str) -> int:
    """argparse ``type`` of ``--models``: 1 up to the profiles the library has."""
    value = positive_int(text)
    have = len(library_models())
    if value > have:
        raise argparse.ArgumentTypeError(
            f"the profile library has {have} models, got {value} (at most {have})"
        )
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--seconds",
        type=positive_float,
        default=5.0,
        help="seconds per client count and endpoint, above 0 (default 5)",
    )
    ap.add_argument(
        "--clients",
        type=positive_int,
        nargs="+",
        default=[1, 4, 16, 64],
        help="concurrent client counts, each >= 1 (default: 1 4 16 64)",
    )
    ap.add_argument(
        "--workers", type=positive_int, default=2, help="cassini serve --workers, >= 1 (default 2)"
    )
    ap.add_argument(
        "--jobs",
        type=non_negative_int,
        default=200,
        help="running jobs in the cluster, >= 0 (default 200)",
    )
    ap.add_argument(
        "--models",
        type=model_count,
        default=4,
        help="distinct pod profiles sent, 1 up to the library's models (default 4)",
    )
    ap.add_argument(
        "--seed", type=non_negative_int, default=1, help="random seed, >= 0 (default 1)"
    )
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    return ap.parse_args(argv)


def progress(text: str) -> None:
    """One progress line on stderr (stdout carries only the figures: ``--json``)."""
    print(f"bench_service: {text}", file=sys.stderr, flush=True)


TOKEN = "bench-token-0123456789abcdef"


def start_server(tmp: Path, cluster_path: Path, workers: int) -> tuple[subprocess.Popen, int]:
    """``cassini serve --cluster FILE`` with SQLite state and tokens, in a subprocess;
    (process, port)."""
    (tmp / "tokens").write_text(f"{TOKEN} bench\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cassini.cli",
            "serve",
            "--port",
            "0",
            "--cluster",
            str(cluster_path),
            "--workers",
            str(workers),
            "--quiet",
            "--state",
            str(tmp / "state.sqlite"),
            "--token-file",
            str(tmp / "tokens"),
            "--audit-log",
            str(tmp / "audit.jsonl"),
            "--write-rate",
            "0",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    line = proc.stderr.readline()
    if "listening on" not in line:
        proc.kill()
        raise SystemExit(f"cassini serve did not start: {line}{proc.stderr.read()}")
    return proc, int(line.split("127.0.0.1:")[1].split()[0])


def measure_http(port: int, args: argparse.Namespace, advise_body: bytes,
                 prio_bodies: list[bytes], figures: dict) -> None:
    """Cold first prioritize requests, then every endpoint at every client count."""
    # cold: the first request of each model in each worker computes its link scores
    progress(f"prioritize: first requests of {len(prio_bodies)} model(s) in each worker")
    cold = []
    for body in prio_bodies:
        for _ in range(args.workers):
            status, seconds = send_once(port, http_request("/k8s/v1/prioritize", body))
            cold.append(seconds * 1e3)
            assert status == 200, status
    figures["prioritize_first_requests_ms"] = cold
    # the other workers may not have seen every model yet: warm them all
    for _ in range(3):
        for body in prio_bodies:
            for _ in range(args.workers):
                send_once(port, http_request("/k8s/v1/prioritize", body))
    advise_reqs = [http_request("/v1/advise", advise_body)]
    prio_reqs = [http_request("/k8s/v1/prioritize", b) for b in prio_bodies]
    figures["http"] = {"advise": [], "prioritize": [], "writes": []}
    for clients in args.clients:
        progress(f"advise and prioritize, {clients} client(s), {args.seconds:g} s each")
        figures["http"]["advise"].append(load(port, advise_reqs, clients, args.seconds))
        figures["http"]["prioritize"].append(load(port, prio_reqs, clients, args.seconds))
    # last: a write changes the registry, and the next read would pay for the new state
    for clients in args.clients:
        progress(f"writes, {clients} client(s), {args.seconds:g} s")
        figures["http"]["writes"].append(load(port, "writes", clients, args.seconds))


def measure_in_process(doc: dict, prio_bodies: list[bytes], figures: dict) -> None:
    """The same computations called directly, in this process (no HTTP, no worker)."""
    from cassini import api
    from cassini.advisor import clear_link_cache
    from cassini.service import k8s
    from cassini.service.cluster import read_cluster
    from cassini.service.scoring import Prepared, State, score_nodes

    request = api.example("advise")
    api.advise_request(request, workers=1)
    figures["in_process"] = {"advise": timed(lambda: api.advise_request(request, workers=1), 200)}
    clear_link_cache()
    cluster, jobs = read_cluster(doc)
    state = State(1, cluster, {j.job_id: j for j in jobs})
    prepared = Prepared(state)

    def prioritize_in_process(k=[0]):  # noqa: B006 - a counter
        body = json.loads(prio_bodies[k[0] % len(prio_bodies)])
        k[0] += 1
        a = k8s.read_extender_args(body)
        pod = k8s.pod_profile(a, state.jobs)
        scores = score_nodes(prepared, pod, a.node_names)
        json.dumps(
            k8s.priority_list(
                [(s.node, s.score, s.extender_score, s.worst_link, s.worst_jobs) for s in scores]
            )
        )

    t0 = time.perf_counter()
    for _ in prio_bodies:
        prioritize_in_process()
    figures["in_process_prioritize_cold_ms_per_model"] = (
        (time.perf_counter() - t0) * 1e3 / len(prio_bodies)
    )
    figures["in_process"]["prioritize"] = timed(prioritize_in_process, 200)


def print_figures(figures: dict, workers: int) -> None:
    print(
        f"cluster: {figures['nodes']} nodes, {figures['running_jobs']} running jobs on "
        f"{figures['nodes_used']} nodes; prioritize body {figures['prioritize_body_bytes']} "
        f"bytes; {figures['cpus']} CPUs, cassini serve --workers {workers}"
    )
    print(
        "prioritize, first request per model and worker (cold link cache), ms: "
        + ", ".join(f"{x:.0f}" for x in figures["prioritize_first_requests_ms"])
        + f"; in-process cold {figures['in_process_prioritize_cold_ms_per_model']:.0f} ms/model"
    )
    print("server: SQLite state file (WAL, synchronous=FULL), bearer tokens, audit log file; "
          "writes = POST + PUT + DELETE of a job, req/s = writes/s")
    print(f"{'endpoint':<12} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
    for ep in ("advise", "prioritize", "writes"):
        for r in figures["http"][ep]:
            print(
                f"{ep:<12} {r['clients']:>7} {r['req_per_s']:>8.1f} {_ms(r['p50_ms'])} "
                f"{_ms(r['p99_ms'])} {r['errors']:>6}"
            )
        if ep not in figures["in_process"]:
            continue
        ip = figures["in_process"][ep]
        print(
            f"{ep:<12} {'in-proc':>7} {1e3 / ip['mean_ms']:>8.1f} {ip['p50_ms']:>8.2f} "
            f"{ip['p99_ms']:>8.2f} {'-':>6}"
        )


def _ms(value: float | None) -> str:
    """A latency column: ``-`` when no request completed in the time given."""
    return f"{value:>8.2f}" if value is not None else f"{'-':>8}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from cassini import api

    progress(f"cluster: {RACKS * NODES_PER_RACK} nodes, {args.jobs} running jobs")
    doc = make_cluster(args.jobs, args.seed)
    node_names = list(doc["nodes"])
    models = library_models()[: args.models]
    advise_body = json.dumps(api.example("advise")).encode()
    prio_bodies = [json.dumps(prioritize_body(m, node_names)).encode() for m in models]
    figures: dict = {
        "nodes": len(node_names),
        "running_jobs": len(doc["jobs"]),
        "nodes_used": sum(len(j["nodes"]) for j in doc["jobs"]),
        "prioritize_body_bytes": len(prio_bodies[0]),
        "cpus": os.cpu_count(),
        "workers": args.workers,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.json"
        path.write_text(json.dumps(doc))
        progress(f"starting cassini serve --workers {args.workers}")
        proc, port = start_server(Path(tmp), path, args.workers)
        try:
            measure_http(port, args, advise_body, prio_bodies, figures)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    progress("the same computations in this process")
    measure_in_process(doc, prio_bodies, figures)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print_figures(figures, args.workers)


if __name__ == "__main__":
    main()
