"""Every headline figure of the README, re-measured by one command.

    .venv/bin/python -m experiments.headlines --list
    sudo .venv/bin/python -m experiments.headlines [--only ID ...] [--allow-busy]
    .venv/bin/python -m experiments.headlines --render

:data:`HEADLINES` is the table: per headline what it measures, its command, how many
times it runs (5 for testbed runs, 3 for benchmarks), how its values are read from the
command's output, their units, the target and whether it needs root.  A run set runs each
repeat of each chosen headline in this one invocation and records every run (commit and
whether the tree was dirty, UTC date, CPU model, cores, the host's load before and after);
a run that starts on a busy host (:func:`experiments.figures.is_busy`: the 1-minute load
average above 0.5 per core, or the CPUs more than 25 % busy over 2 s) is kept but not used
for the figure unless ``--allow-busy``, which labels the figure "busy host".

As soon as each headline's runs end it writes ``docs/figures/<id>.json`` (the run set and
its summary: median [min, max] of N, date, machine), puts the run set's one dated entry in
``docs/results.md`` (listing the headlines finished so far) and re-renders the README's
marked figures (``--render`` does only that): the headline table between
``<!-- headlines:table -->`` markers and each ``<!-- headline:ID -->…<!-- /headline:ID -->``
in the text.  Each file is replaced whole (never left half-written), so a run set
interrupted or killed leaves every finished headline recorded in all three and nothing of
the one it was running.  A headline without a figures file renders as "not yet re-measured".
A damaged figures file or a README marker naming no headline stops the command (exit 2)
before anything runs.
``tests/test_headlines.py`` fails when the README differs from its rendering.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cassini.files import positive_float
from cassini.outputs import replaced
from experiments import host_load
from experiments.figures import (
    HostLoad,
    MetricView,
    Target,
    figure_text,
    is_busy,
    not_measured_text,
    only_our_residue,
    replace_marked,
    summarise,
)

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results.md"
RUNS_DIR = ROOT / "results" / "headlines"  # each run's {out} folder, under <id>/run<k>
HISTORY_HEADING = "## 8. Headline re-measurements"
TESTBED_REPEATS = 5
BENCHMARK_REPEATS = 3
SETTLE_MAX_S = 90.0  # longest wait for our previous run to leave the load average
Values = dict[str, float]
Extract = Callable[[str, Path], Values]


@dataclass(frozen=True)
class Headline:
    """One headline figure.  ``argv``: the command, run from the repository root; a first
    word ``python`` (``cassini``) is this interpreter (its ``cassini`` script), and
    ``{out}`` becomes a fresh folder per run (under ``results/headlines/``).  ``extract``
    reads the values from the command's stdout and that folder; ``metrics`` are the
    values shown (their labels and units), ``target`` the one the figure is held to."""

    id: str
    what: str
    argv: tuple[str, ...]
    repeats: int
    extract: Extract
    metrics: tuple[MetricView, ...]
    target: Target | None
    needs_root: bool

    def __post_init__(self) -> None:
        names = {m.name for m in self.metrics}
        if self.target is not None and self.target.metric not in names:
            raise ValueError(f"headline {self.id}: target metric {self.target.metric!r} not shown")
        if self.repeats < 1:
            raise ValueError(f"headline {self.id}: repeats must be >= 1")

    def command_text(self) -> str:
        """The command as a user types it from the repository root."""
        words = []
        for w in self.argv:
            if w == "python":
                w = ".venv/bin/python"
            elif w == "cassini" and not words:
                w = ".venv/bin/cassini"
            words.append(w.replace("{out}", f"results/headlines/{self.id}"))
        return ("sudo " if self.needs_root else "") + shlex.join(words)

    def rerun_text(self) -> str:
        """The command that re-measures this headline."""
        prefix = "sudo " if self.needs_root else ""
        return f"{prefix}.venv/bin/python -m experiments.headlines --only {self.id}"

    def argv_here(self, out: Path) -> list[str]:
        words = []
        for k, w in enumerate(self.argv):
            if k == 0 and w == "python":
                w = sys.executable
            elif k == 0 and w == "cassini":
                w = str(Path(sys.executable).parent / "cassini")
            words.append(w.replace("{out}", str(out)))
        return words


def m(name: str, label: str, unit: str = "") -> MetricView:
    return MetricView(name, label, unit)


def stdout_json(stdout: str) -> Any:
    """The JSON document a command printed: the whole stdout, else the last line (or the
    last run of lines) that parses."""
    text = stdout.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    lines = text.splitlines()
    for k in range(len(lines) - 1, -1, -1):
        if lines[k].lstrip().startswith(("{", "[")):
            try:
                return json.loads("\n".join(lines[k:]))
            except ValueError:
                continue
    raise ValueError("no JSON document in the command's output")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise ValueError(f"{path}: the command wrote no results file") from e


# --- extractors: (stdout, out folder) -> values --------------------------------------


def advisor_1024(stdout: str, out: Path) -> Values:
    f = stdout_json(stdout)
    ms = f["ms_per_candidate"]
    return {
        "ms": ms["serial, reject"],
        "cpu_ms": f["cpu_ms_per_candidate"]["serial, reject"],
        "naive_ms": ms["links only, no dedup"],
        "vs_naive": ms["serial, reject"] / ms["links only, no dedup"],
    }


def advisor_scaling(stdout: str, out: Path) -> Values:
    small, large = stdout_json(stdout)
    a, b = small["ms_per_candidate"]["serial, reject"], large["ms_per_candidate"]["serial, reject"]
    return {"ms_1k": a, "ms_16k": b, "ratio": b / a}


def agent_cost(stdout: str, out: Path) -> Values:
    ahead = stdout_json(stdout)["modes"]["ahead"]
    return {
        "median_pct": max(r["median_pct_of_step"] for r in ahead.values()),
        "p99_pct": max(r["p99_pct_of_step"] for r in ahead.values()),
    }


def service(stdout: str, out: Path) -> Values:
    http = stdout_json(stdout)["http"]
    prio = next(r for r in http["prioritize"] if r["clients"] == 16)
    writes = next(r for r in http["writes"] if r["clients"] == 16)
    errors = sum(r["errors"] for rows in http.values() for r in rows)
    return {
        "prio_p99_ms": prio["p99_ms"],
        "writes_per_s": writes["req_per_s"],
        "errors": float(errors),
    }


def sim_speed(stdout: str, out: Path) -> Values:
    rows = stdout_json(stdout)["rows"]
    th, tc = rows["themis"], rows["themis+cassini"]
    return {
        "themis_s": th["wall_s"],
        "cassini_s": tc["wall_s"],
        "ratio": tc["wall_s"] / th["wall_s"],
        "themis_mean": th["mean_slowdown"],
        "cassini_mean": tc["mean_slowdown"],
        "themis_p99": th["p99_slowdown"],
        "cassini_p99": tc["p99_slowdown"],
    }


def sim_reference(stdout: str, out: Path) -> Values:
    row = stdout_json(stdout)["rows"]["themis"]
    return {"cpu_s": row["cpu_s"], "ratio": row["cpu_s"] / row["reference"]["cpu_s"]}


def sim_16k(stdout: str, out: Path) -> Values:
    row = stdout_json(stdout)["rows"]["themis+cassini"]
    return {"wall_s": row["wall_s"], "cpu_s": row["cpu_s"]}


def sim_sweep(stdout: str, out: Path) -> Values:
    data = read_json(out / "sweep.json")
    values: Values = {}
    for pair in ("themis/themis+cassini", "pollux/pollux+cassini"):
        rs = [r["mean_iteration_s"] for r in data["ratios"] if r["pair"] == pair]
        if rs:
            values[pair] = statistics.median(rs)
    axes = [a for a in data.get("axes", []) if a != "scheduler"]
    by_point: dict[tuple, dict[str, float]] = {}
    for r in data["aggregate"]:
        by_point.setdefault(tuple(r.get(a) for a in axes), {})[r["scheduler"]] = r[
            "mean_iteration_s"
        ]
    rand = [
        p["themis+random"] / p["themis+cassini"]
        for p in by_point.values()
        if "themis+random" in p and p.get("themis+cassini")
    ]
    if rand:
        values["themis+random/themis+cassini"] = statistics.median(rand)
    return values


def mltcp_overhead(stdout: str, out: Path) -> Values:
    f = stdout_json(stdout)
    ratios = {k: v for k, v in f["ratios"].items() if k.startswith("mltcp_")}
    calls = [v for v in f["ns_per_call"].values() if v is not None]
    return {
        "worst_ratio": min(ratios.values()),
        "ns_per_call_max": max(calls) if calls else math.nan,
    }


def cassini_repeats_file(name: str) -> Extract:
    def extract(stdout: str, out: Path) -> Values:
        row = read_json(out / f"{name}.json")["runs"][0]
        return {
            "cassini": row["cassini_vs_ideal"],
            "same_start": row["baseline_vs_ideal"],
            "vs_same_start": row["cassini_vs_baseline"],
        }

    return extract


def real_models_schemes(scheme: str, column: str, prefix: str) -> Extract:
    """Per case, ``scheme``'s ``column`` (and the same start's), and the worst case's."""

    def extract(stdout: str, out: Path) -> Values:
        cases = read_json(out / "results.json")["cases"]
        values: Values = {}
        for case, entry in cases.items():
            rows = {r["scheme"]: r for r in entry["rows"]}
            if scheme in rows:
                values[f"{prefix}_{case}"] = rows[scheme][column]
            if "baseline" in rows:
                values[f"same_start_{case}"] = rows["baseline"][column]
        ours = [v for k, v in values.items() if k.startswith(f"{prefix}_")]
        if not ours:
            raise ValueError(f"results.json: no {scheme} row")
        values["worst"] = max(ours)
        return values

    return extract


def link_interleaving(stdout: str, out: Path) -> Values:
    runs = read_json(out / "results.json")["runs"]
    values: Values = {}
    for key, entry in runs.items():
        if not key.startswith("pair-"):
            continue
        rows = {r["scheme"]: r for r in entry["rows"]}
        values[f"cassini_{key}"] = rows["cassini"]["mean_vs_ideal"]
        values[f"same_start_{key}"] = rows["baseline"]["mean_vs_ideal"]
    ours = [v for k, v in values.items() if k.startswith("cassini_")]
    values["worst"] = max(ours)
    values["best_same_start"] = min(v for k, v in values.items() if k.startswith("same_start_"))
    return values


def clock_offset(stdout: str, out: Path) -> Values:
    rows = read_json(out / "results.json")["rows"]
    return {
        "worst": max(r["cassini_vs_ideal"] for r in rows),
        "same_start_best": min(r["baseline_vs_ideal"] for r in rows),
    }


def mltcp_convergence(stdout: str, out: Path) -> Values:
    rows = read_json(out / "results.json")["rows"]
    got = {(r["case"], r["scheme"]): r["last_vs_ideal"] for r in rows if "last_vs_ideal" in r}
    return {
        "mltcp_two": got[("ecn", "mltcp_dctcp")],
        "dctcp_two": got[("ecn", "dctcp_bpf")],
        "mltcp_three": got[("ecn-trio", "mltcp_dctcp")],
        "dctcp_three": got[("ecn-trio", "dctcp_bpf")],
    }


def sim_fidelity(stdout: str, out: Path) -> Values:
    rows = read_json(out / "results.json")["rows"]
    within = [abs(r["ratio"] - 1) <= 0.10 for r in rows]
    return {
        "share_within": sum(within) / len(within),
        "worst": max(abs(r["ratio"] - 1) for r in rows),
    }



def sim_vs_packet(stdout: str, out: Path) -> Values:
    """Fluid vs packet level over every scenario run: the worst scheme's
    |fluid ÷ packet − 1| of mean slowdown, the smallest share of jobs within 20 %, and
    the scheme pairs the two models rank differently (issue 33 §2)."""
    scenarios = read_json(out / "results.json")["scenarios"]
    verdicts = [s["verdict"] for s in scenarios.values() if "verdict" in s]
    if not verdicts:
        raise ValueError("results.json: no scenario finished")
    return {
        "worst_scheme": max(v["worst_scheme_error"] for v in verdicts),
        "jobs_within": min(v["jobs_within_20pc_share"] for v in verdicts),
        "discordant": float(sum(v["discordant_pairs"] for v in verdicts)),
    }

# --- the table ------------------------------------------------------------------------

PY = "python"
REPEATS_CONFIG = "experiments.cassini_repeats"
HEADLINES: tuple[Headline, ...] = (
    Headline(
        "cassini_fair_two_50",
        "CASSINI, two 50 % jobs on `fair` (30 iterations), × ideal",
        (PY, "-m", REPEATS_CONFIG, "experiments/configs/fair_two_jobs.yaml",
         "--runs", "1", "--iterations", "30", "--out", "{out}"),
        TESTBED_REPEATS,
        cassini_repeats_file("fair_two_jobs"),
        (m("cassini", "CASSINI", "×"), m("same_start", "same start", "×"),
         m("vs_same_start", "CASSINI ÷ same start")),
        Target("cassini", "<=", 1.10),
        True,
    ),
    Headline(
        "cassini_pytorch_pcap",
        "CASSINI, two PyTorch DDP jobs, profiles from a capture, × ideal",
        (PY, "-m", REPEATS_CONFIG, "experiments/configs/pytorch_pcap.yaml",
         "--runs", "1", "--out", "{out}"),
        TESTBED_REPEATS,
        cassini_repeats_file("pytorch_pcap"),
        (m("cassini", "CASSINI", "×"), m("same_start", "same start", "×"),
         m("vs_same_start", "CASSINI ÷ same start")),
        Target("vs_same_start", "<=", 1.02),
        True,
    ),
    Headline(
        "cassini_vgg11_pair",
        "CASSINI, VGG-11 DDP pair on `fair` and `ecn`, mean × ideal",
        (PY, "-m", "experiments.real_models", "--cases", "pair-fair", "pair-ecn",
         "--schemes", "baseline", "cassini", "--out", "{out}"),
        TESTBED_REPEATS,
        real_models_schemes("cassini", "mean_vs_ideal", "cassini"),
        (m("cassini_pair-fair", "`fair`", "×"), m("cassini_pair-ecn", "`ecn`", "×"),
         m("worst", "worst", "×")),
        Target("worst", "<=", 1.08),
        True,
    ),
    Headline(
        "cassini_bert_pair",
        "CASSINI, BERT-base DDP pair at 50 Gbit/s, mean × ideal",
        (PY, "-m", "experiments.real_models", "--model", "bert_base", "--nic-gbps", "50",
         "--iterations", "60", "--cases", "pair-ecn", "pair-fair", "--schemes", "baseline",
         "cassini", "--out", "{out}"),
        TESTBED_REPEATS,
        real_models_schemes("cassini", "mean_vs_ideal", "cassini"),
        (m("cassini_pair-ecn", "`ecn`", "×"), m("cassini_pair-fair", "`fair`", "×"),
         m("worst", "worst", "×")),
        Target("worst", "<=", 1.08),
        True,
    ),
    Headline(
        "cassini_compatible_pair",
        "CASSINI, compatible pair of experiment 1 on every fabric, mean × ideal",
        (PY, "-m", "experiments.link_interleaving", "--full", "--out", "{out}"),
        TESTBED_REPEATS,
        link_interleaving,
        (m("worst", "CASSINI, worst fabric", "×"),
         m("best_same_start", "same start, best fabric", "×")),
        Target("worst", "<=", 1.08),
        True,
    ),
    Headline(
        "cassini_clock_offsets",
        "CASSINI with the jobs' clocks 0–20 ms apart, mean × ideal",
        (PY, "-m", "experiments.clock_offset", "--offsets-ms", "0", "5", "10", "20",
         "--out", "{out}"),
        TESTBED_REPEATS,
        clock_offset,
        (m("worst", "CASSINI, worst offset", "×"),
         m("same_start_best", "same start, best", "×")),
        None,
        True,
    ),
    Headline(
        "mltcp_two_dctcp",
        "MLTCP, DCTCP jobs starting together on `ecn`, last third × ideal",
        (PY, "-m", "experiments.mltcp_convergence", "--full", "--out", "{out}"),
        TESTBED_REPEATS,
        mltcp_convergence,
        (m("mltcp_two", "two jobs, MLTCP", "×"), m("dctcp_two", "DCTCP", "×"),
         m("mltcp_three", "three jobs, MLTCP", "×"), m("dctcp_three", "DCTCP", "×")),
        None,
        True,
    ),
    Headline(
        "mltcp_bert_pair",
        "MLTCP (exact mode), BERT-base DDP pair on `ecn`, last 20 × ideal",
        (PY, "-m", "experiments.real_models", "--model", "bert_base", "--nic-gbps", "50",
         "--iterations", "60", "--cases", "pair-ecn", "--schemes", "baseline", "mltcp-exact",
         "--out", "{out}"),
        TESTBED_REPEATS,
        real_models_schemes("mltcp-exact", "last20_vs_ideal", "mltcp"),
        (m("mltcp_pair-ecn", "MLTCP", "×"), m("same_start_pair-ecn", "DCTCP same start", "×")),
        Target("mltcp_pair-ecn", "<=", 1.10),
        True,
    ),
    Headline(
        "sim_fidelity",
        "simulator vs testbed: share of rows within 10 %",
        (PY, "-m", "experiments.sim_fidelity", "--runs", "1", "--out", "{out}"),
        TESTBED_REPEATS,
        sim_fidelity,
        (m("share_within", "rows within 10 %"), m("worst", "worst |sim ÷ testbed − 1|")),
        Target("share_within", ">=", 1.0),
        True,
    ),
    Headline(
        "sim_vs_packet",
        "fluid model vs ns-3 packet level (quick scenarios): worst scheme's mean slowdown error",
        (PY, "-m", "experiments.sim_vs_packet", "--out", "{out}"),
        1,  # both models are deterministic for a seed: repeats differ in CPU time only
        sim_vs_packet,
        (m("worst_scheme", "worst |fluid ÷ packet − 1|"), m("jobs_within", "jobs within 20 %"),
         m("discordant", "discordant scheme pairs")),
        Target("worst_scheme", "<=", 0.10),
        False,
    ),
    Headline(
        "mltcp_overhead",
        "MLTCP overhead, 100 flows on a shaped link: throughput ÷ base control",
        (PY, "benchmarks/bench_mltcp_overhead.py", "--json"),
        BENCHMARK_REPEATS,
        mltcp_overhead,
        (m("worst_ratio", "worst MLTCP ÷ base"), m("ns_per_call_max", "BPF call", "ns")),
        None,
        True,
    ),
    Headline(
        "agent_cost",
        "time-shift agent's cost per 100 ms step (decision an iteration ahead)",
        (PY, "benchmarks/bench_timeshift.py", "--json"),
        BENCHMARK_REPEATS,
        agent_cost,
        (m("median_pct", "median", "%"), m("p99_pct", "p99", "%")),
        Target("median_pct", "<=", 1.0),
        False,
    ),
    Headline(
        "advisor_1024",
        "advisor, 1,024-GPU cluster, measured library, serial: time per candidate",
        (PY, "benchmarks/bench_advisor.py", "--scales", "1", "--repeat", "1", "--json"),
        BENCHMARK_REPEATS,
        advisor_1024,
        (m("vs_naive", "advisor ÷ naive per-link baseline"), m("ms", "per candidate", "ms"),
         m("cpu_ms", "CPU", "ms")),
        Target("vs_naive", "<=", 0.5),
        False,
    ),
    Headline(
        "advisor_16k_scaling",
        "advisor, 16,384 GPUs against 1,024: time per candidate",
        (PY, "benchmarks/bench_advisor.py", "--scales", "1", "16", "--repeat", "1", "--json"),
        BENCHMARK_REPEATS,
        advisor_scaling,
        (m("ratio", "16,384 ÷ 1,024", "×"), m("ms_16k", "16,384 GPUs", "ms")),
        Target("ratio", "<=", 15.0),
        False,
    ),
    Headline(
        "service_prioritize",
        "service, prioritize over 1,000 nodes at 16 clients (SQLite, tokens, audit)",
        (PY, "benchmarks/bench_service.py", "--clients", "16", "--json"),
        BENCHMARK_REPEATS,
        service,
        (m("prio_p99_ms", "p99", "ms"), m("writes_per_s", "writes", "/s"),
         m("errors", "errors")),
        Target("prio_p99_ms", "<=", 100.0),
        False,
    ),
    Headline(
        "sim_paper_sweep",
        "simulator, paper-shaped cluster: mean iteration, scheme ÷ with CASSINI",
        ("cassini", "sim", "sweep", "experiments/configs/sim_paper.yaml", "--out", "{out}"),
        BENCHMARK_REPEATS,
        sim_sweep,
        (m("themis/themis+cassini", "Themis ÷ Th+CASSINI", "×"),
         m("themis+random/themis+cassini", "Themis+random ÷ Th+CASSINI", "×")),
        None,
        False,
    ),
    Headline(
        "sim_1024",
        "simulator, 1,000 jobs on 1,024 GPUs: run time and slowdown over dedicated",
        (PY, "benchmarks/bench_sim.py", "--json"),
        BENCHMARK_REPEATS,
        sim_speed,
        (m("ratio", "Th+CASSINI ÷ Themis run time", "×"), m("themis_s", "Themis", "s"),
         m("cassini_s", "Th+CASSINI", "s"), m("themis_mean", "mean slowdown Themis"),
         m("cassini_mean", "Th+CASSINI")),
        Target("ratio", "<=", 1.5),
        False,
    ),
    Headline(
        "sim_compiled_loop",
        "simulator, compiled event loop against the numpy reference (250 jobs, Themis): CPU",
        (PY, "benchmarks/bench_sim.py", "--jobs", "250", "--schedulers", "themis",
         "--reference", "--json"),
        BENCHMARK_REPEATS,
        sim_reference,
        (m("ratio", "compiled ÷ reference", "×"), m("cpu_s", "compiled", "s")),
        None,
        False,
    ),
    Headline(
        "sim_16k",
        "simulator, 10,000 jobs on 16,384 GPUs (continuous), Themis + CASSINI: run time",
        (PY, "benchmarks/bench_sim.py", "--config", "experiments/configs/sim_16k.yaml",
         "--schedulers", "themis+cassini", "--json"),
        BENCHMARK_REPEATS,
        sim_16k,
        (m("wall_s", "run time", "s"), m("cpu_s", "CPU", "s")),
        Target("wall_s", "<=", 480.0),
        False,
    ),
)  # fmt: skip
BY_ID = {h.id: h for h in HEADLINES}


# --- running --------------------------------------------------------------------------


def progress(text: str) -> None:
    print(f"[headlines] {text}", file=sys.stderr, flush=True)


#: what this command writes itself: a change there does not make the measured tree dirty
OWN_OUTPUTS = ("README.md", "docs/results.md", "docs/figures")


def git_state() -> tuple[str, bool]:
    """(commit, whether the tree has uncommitted changes outside :data:`OWN_OUTPUTS`, so
    that one headline's rendering does not mark the next one's runs dirty)."""
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    exclude = [f":(exclude){path}" for path in OWN_OUTPUTS]
    status = subprocess.run(
        ["git", "status", "--porcelain", "--", ".", *exclude],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return commit, bool(status.strip())


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def settled_load(sample_s: float, settle_max_s: float = SETTLE_MAX_S) -> HostLoad:
    """The host's load before a run, after waiting (at most :data:`SETTLE_MAX_S`) while the
    1-minute average only remembers our own previous run."""
    waited = 0.0
    load = host_load.sample(sample_s)
    while only_our_residue(load) and waited < settle_max_s:
        time.sleep(10.0)
        waited += 10.0 + sample_s
        load = host_load.sample(sample_s)
    return load


def run_once(
    h: Headline,
    k: int,
    state: tuple[str, bool],
    machine: Mapping[str, Any],
    sample_s: float,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Run ``h``'s command once (killed after ``timeout_s`` seconds, if given) and record it."""
    out = RUNS_DIR / h.id / f"run{k}"
    out.mkdir(parents=True, exist_ok=True)
    before = settled_load(sample_s)
    busy = is_busy(before)
    date = utc_now()
    argv = h.argv_here(out)
    progress(
        f"{h.id} run {k}/{h.repeats}: load {before.load_per_core:.2f}/core, CPUs "
        f"{before.busy_fraction:.0%} busy{' -> BUSY host' if busy else ''}; {shlex.join(argv)}"
    )
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        returncode, stdout, stderr = None, "", f"timed out after {timeout_s} s"
    duration = time.monotonic() - t0
    after = host_load.sample(sample_s)
    values: Values = {}
    error = None
    if returncode != 0:
        error = f"exit {returncode}: {stderr.strip()[-2000:]}"
    else:
        try:
            values = {name: float(v) for name, v in h.extract(stdout, out).items()}
        except (ValueError, KeyError, IndexError, TypeError, StopIteration) as e:
            error = f"could not read the values: {type(e).__name__}: {e}"
    progress(
        f"{h.id} run {k}/{h.repeats}: {duration:.1f} s, "
        + (error or ", ".join(f"{n}={v:.4g}" for n, v in values.items()))
    )
    return {
        "run": k,
        "date": date,
        "commit": state[0],
        "dirty": state[1],
        "machine": dict(machine),
        "command": h.command_text(),
        "load_before": before.as_json(),
        "load_after": after.as_json(),
        "busy": busy,
        "returncode": returncode,
        "duration_s": duration,
        "values": values,
        "error": error,
    }


def figure_for(h: Headline, runs: list[dict[str, Any]], allow_busy: bool) -> dict[str, Any]:
    return {
        "id": h.id,
        "what": h.what,
        "command": h.command_text(),
        "needs_root": h.needs_root,
        "allow_busy": allow_busy,
        "units": {x.name: x.unit for x in h.metrics},
        "runs": runs,
        "summary": summarise(runs, [x.name for x in h.metrics], h.target, allow_busy),
    }


def load_figures(where: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every ``<id>.json`` under ``where`` (default :data:`FIGURES`) by id; a file that is
    not JSON (truncated, say) or names an unknown headline raises ValueError naming it."""
    out = {}
    for path in sorted((FIGURES if where is None else where).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise ValueError(f"{path}: damaged figures file, not JSON ({e})") from e
        if not isinstance(data, dict) or data.get("id") != path.stem or path.stem not in BY_ID:
            raise ValueError(f"{path}: not a figures file of a known headline")
        out[path.stem] = data
    return out


def write_text_whole(path: Path, text: str) -> None:
    """Write ``path`` atomically: a temporary file beside it, moved onto it when complete,
    so that an interrupt leaves the old file or the new one, never half of one."""
    with replaced(path) as tmp:
        tmp.write_text(text)


# --- rendering ------------------------------------------------------------------------


def cell(h: Headline, figure: Mapping[str, Any] | None) -> str:
    """The README text of ``h``'s figure, or how to measure it."""
    summary = figure.get("summary") if figure else None
    if not summary:
        return not_measured_text(h.rerun_text())
    return figure_text(summary, h.metrics)


def table(figures: Mapping[str, Mapping[str, Any]]) -> str:
    lines = ["| what | figure | target | command |", "|---|---|---|---|"]
    for h in HEADLINES:
        target = "—"
        if h.target is not None:
            shown = next(x for x in h.metrics if x.name == h.target.metric)
            unit = f" {shown.unit}" if shown.unit else ""
            target = f"{shown.label} {h.target.text()}{unit}"
        what, figure, target = (_in_table(x) for x in (h.what, cell(h, figures.get(h.id)), target))
        lines.append(f"| {what} | {figure} | {target} | `{h.command_text()}` |")
    return "\n".join(lines) + "\n"


def _in_table(text: str) -> str:
    """``text`` as a Markdown table cell: its own bars (``|x - 1|``) escaped, so that they
    do not split the row into more columns."""
    return text.replace("|", "\\|")


def render(text: str, figures: Mapping[str, Mapping[str, Any]]) -> str:
    """The README ``text`` with every marked figure rendered from ``figures``."""
    inline = {h.id: cell(h, figures.get(h.id)) for h in HEADLINES}
    return replace_marked(text, inline, table(figures))


def run_failed(run: Mapping[str, Any]) -> bool:
    """Whether a recorded run failed: a non-zero exit, a time-out or values not read."""
    return run.get("returncode") != 0 or bool(run.get("error"))


def history_entry(figures: Sequence[Mapping[str, Any]], when: str, allow_busy: bool) -> str:
    """One dated entry of ``docs/results.md`` for a run set."""
    first = figures[0]["runs"][0] if figures and figures[0]["runs"] else {}
    mach = first.get("machine", {})
    head = (
        f"\n### {when[:16].replace('T', ' ')} UTC: {', '.join(f['id'] for f in figures)}\n\n"
        f"`.venv/bin/python -m experiments.headlines` at {first.get('commit', '?')[:12]}"
        f"{' (dirty tree)' if first.get('dirty') else ''} on {mach.get('cpu_model', '?')}, "
        f"{mach.get('cores', '?')} cores{'; --allow-busy' if allow_busy else ''}.\n\n"
    )
    lines = []
    for f in figures:
        h = BY_ID[f["id"]]
        busy = sum(bool(r.get("busy")) for r in f["runs"])
        failed = sum(run_failed(r) for r in f["runs"])
        loads = ", ".join(f"{r['load_before']['load_per_core']:.2f}" for r in f["runs"])
        lines.append(
            f"- `{h.id}`: {cell(h, f)}; {len(f['runs'])} runs, {busy} on a busy host, "
            f"{failed} failed; load per core before each: {loads}"
        )
    return head + "\n".join(lines) + "\n"


def append_history(entry: str, path: Path | None = None, replacing: str = "") -> None:
    """Append ``entry`` to ``path`` (default :data:`RESULTS`), or put it in place of the
    last ``replacing`` there (the same run set's entry before its latest headline)."""
    path = RESULTS if path is None else path
    text = path.read_text()
    if replacing and replacing in text:
        k = text.rindex(replacing)
        write_text_whole(path, text[:k] + entry + text[k + len(replacing) :])
        return
    if HISTORY_HEADING not in text:
        text = text.rstrip("\n") + (
            f"\n\n{HISTORY_HEADING}\n\nAppended by `.venv/bin/python -m experiments.headlines`, "
            "one entry per run set; the figures themselves, with every run, are in "
            "[figures/](figures/).\n"
        )
    write_text_whole(path, text.rstrip("\n") + "\n" + entry)


def rendered_readme(figures: Mapping[str, Mapping[str, Any]]) -> tuple[str, str]:
    """(the README, the README rendered from ``figures``); a marker naming no headline
    raises ValueError naming the marker and the README."""
    old = README.read_text()
    try:
        return old, render(old, figures)
    except ValueError as e:
        raise ValueError(f"{README}: {e}") from e


def write_readme(figures: Mapping[str, Mapping[str, Any]]) -> bool:
    """Re-render the README (atomically); whether it changed."""
    old, new = rendered_readme(figures)
    if new != old:
        write_text_whole(README, new)
    return new != old


def record(h: Headline, figure: dict[str, Any], entry: str, entry_was: str) -> None:
    """Record a finished headline: its figures file (kept as it was when the new figure has
    no usable run), the run set's ``entry`` in the results (in place of ``entry_was``) and
    the README; the README is rendered first, so that a damaged file stops it before any
    of the three is written."""
    path = FIGURES / f"{h.id}.json"
    keep = figure["summary"] is None and path.exists()
    figures = load_figures()
    if not keep:
        figures[h.id] = figure
    old, new = rendered_readme(figures)
    if keep:
        progress(f"{h.id}: no usable run (busy host or failures); {path} kept as it was")
    else:
        write_text_whole(path, json.dumps(figure, indent=1) + "\n")
        progress(f"{h.id}: {cell(h, figure)}")
    append_history(entry, replacing=entry_was)
    if new != old:  # the same figures as rendered above: the README is not written between
        write_text_whole(README, new)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.headlines",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--only", nargs="+", metavar="ID", help="these headlines (default: all)")
    ap.add_argument("--list", action="store_true", help="list the headlines and exit")
    ap.add_argument("--render", action="store_true", help="only re-render the README")
    ap.add_argument(
        "--allow-busy", action="store_true", help="use runs on a busy host (labelled so)"
    )
    ap.add_argument(
        "--repeats", type=int, help="override every headline's repeats (default: its own)"
    )
    ap.add_argument(
        "--sample-s",
        type=positive_float,
        default=2.0,
        help="the CPUs' busy share is sampled this long before and after each run, seconds, "
        "above 0 (default %(default)s)",
    )
    ap.add_argument(
        "--timeout-s",
        type=positive_float,
        help="kill a run after this many seconds, above 0; it is recorded as failed "
        "(default: no limit)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    """The headlines' command line; exit status 0 only when every run of every chosen
    headline finished with its values, 2 for bad flags, a damaged figures file or a README
    marker naming no headline (before anything runs)."""
    ap = parser()
    args = ap.parse_args(argv)
    if args.list:
        for h in HEADLINES:
            root = " (root)" if h.needs_root else ""
            print(f"{h.id:24s} x{h.repeats}{root}  {h.what}\n{'':24s} {h.command_text()}")
        return 0
    try:
        figures = load_figures()
        rendered_readme(figures)
    except ValueError as e:
        ap.error(str(e))
    if args.render:
        changed = write_readme(figures)
        progress("README re-rendered" if changed else "README already up to date")
        return 0
    unknown = [i for i in args.only or [] if i not in BY_ID]
    if unknown:
        ap.error(f"--only: unknown headline(s) {', '.join(unknown)}; --list shows them")
    chosen = [BY_ID[i] for i in args.only] if args.only else list(HEADLINES)
    if args.repeats is not None and args.repeats < 1:
        ap.error("--repeats: at least 1")
    needs_root = [h.id for h in chosen if h.needs_root]
    if needs_root and os.geteuid() != 0:
        ap.error(f"{', '.join(needs_root)} need root (sudo), or leave them out with --only")
    state, machine, started = git_state(), host_load.machine(), utc_now()
    written: list[dict[str, Any]] = []
    entry = ""
    for h in chosen:
        repeats = args.repeats or h.repeats
        runs = [
            run_once(h, k, state, machine, args.sample_s, args.timeout_s)
            for k in range(1, repeats + 1)
        ]
        figure = figure_for(h, runs, args.allow_busy)
        entry_was, entry = entry, history_entry([*written, figure], started, args.allow_busy)
        try:
            record(h, figure, entry, entry_was)
        except ValueError as e:
            ap.error(f"{e}; {h.id} was measured but not recorded")
        written.append(figure)
    failed = [f"{f['id']} run {r['run']}" for f in written for r in f["runs"] if run_failed(r)]
    failed += [f"{f['id']} (no usable run)" for f in written if f["summary"] is None]
    if failed:
        progress(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
