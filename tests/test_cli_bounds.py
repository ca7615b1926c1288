"""The command line's bounds and rough edges a review found: worker counts capped (never
more processes than tasks, never above the service's ``MAX_WORKERS``), bad input that
had ended in a traceback (deep JSON, long integers, a huge job count, a plot path
matplotlib cannot write), output files' modes, ``-`` for standard input, empty job ids,
``--dt-s`` for every source, ``sim topo show --format``, ``cassini --version``, the
shell examples of docs/internals.md, and ``sim trace``'s convert-only flags.

No test starts a real worker pool or a large job count: pools are replaced by
:class:`FakePool` (which records how many processes it was asked for) and bounds are
tried one past the limit, where the check refuses before any work."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import sys
import types
from concurrent.futures import Future
from pathlib import Path

import pytest
from helpers.sim_configs import TINY_CONFIG

from cassini import advisor, cli, outputs
from cassini.errors import InputError
from cassini.service.options import MAX_WORKERS
from cassini.sim.config import config_from_dict
from cassini.sim.report import sweep

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
RECORDER_LOG = DATA / "ddp_recorder_mlp512.jsonl"
HOST_TABLE = ROOT / "experiments" / "configs" / "uneven_three_tier.csv"
DEEP = "[" * 100_000 + "]" * 100_000
LONG_INT = "9" * 5000
CONFIG = TINY_CONFIG


def cassini(capsys, *argv: str, stdin: bytes | str | None = None) -> tuple[int, str, str]:
    """``cassini ARGV`` in this process: exit status, stdout, stderr."""
    old = sys.stdin
    if stdin is not None:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    finally:
        sys.stdin = old
    out, err = capsys.readouterr()
    return code, out, err


def error_line(err: str) -> str:
    """The one error line on stderr (argparse prints its usage above it), no traceback."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if "error:" in ln]
    assert len(lines) == 1, err
    if not err.lstrip().startswith("usage:"):
        assert len(err.strip().splitlines()) == 1, err
    return lines[0]


def write_config(tmp_path: Path, name: str = "sim.yaml", **changes) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(CONFIG | changes))  # JSON is YAML too
    return path


def poisson(jobs) -> dict:
    return {"poisson": {**CONFIG["workload"]["poisson"], "jobs": jobs}}


class FakePool:
    """A ProcessPoolExecutor that starts nothing: runs each task here and records the
    ``max_workers`` asked for and the tasks given."""

    started: list[int] = []
    tasks: list[int] = []

    def __init__(self, max_workers: int) -> None:
        FakePool.started.append(max_workers)

    def __enter__(self) -> FakePool:
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def map(self, fn, tasks, chunksize=1):
        tasks = list(tasks)
        FakePool.tasks.append(len(tasks))
        return [fn(t) for t in tasks]

    def submit(self, fn, *args):
        done: Future = Future()
        done.set_result(fn(*args))
        return done


@pytest.fixture
def fake_pool(monkeypatch):
    FakePool.started, FakePool.tasks = [], []
    monkeypatch.setattr(advisor, "ProcessPoolExecutor", FakePool)
    monkeypatch.setattr(sweep, "ProcessPoolExecutor", FakePool)
    return FakePool


@pytest.fixture
def umask():
    """Set the umask for one test (restored after)."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


# -- 1. worker counts -----------------------------------------------------------------------
@pytest.mark.parametrize("value", [str(MAX_WORKERS + 1), "100000"])
def test_advise_refuses_workers_above_the_services_cap(capsys, fake_pool, value):
    code, out, err = cassini(capsys, "advise", "--example", "--workers", value)
    assert code == 2 and out == ""
    line = error_line(err)
    assert "--workers" in line and f"1..{MAX_WORKERS}" in line and value in line
    assert fake_pool.started == []


def test_advise_takes_the_cap_itself():
    args = cli.build_parser().parse_args(["advise", "--example", "--workers", str(MAX_WORKERS)])
    assert args.workers == MAX_WORKERS


def test_advise_starts_no_more_processes_than_link_problems(capsys, fake_pool):
    """``--workers 40`` on the example's few link problems had forked 40 processes."""
    advisor.clear_link_cache()  # else earlier calls' solutions leave nothing to solve
    code, out, _ = cassini(capsys, "advise", "--example", "--workers", "40")
    assert code == 0 and json.loads(out)["best"]
    assert fake_pool.started and fake_pool.tasks, "the pool was not used at all"
    assert fake_pool.started[0] == fake_pool.tasks[0] < 40


def test_pool_size_is_capped_by_the_tasks():
    assert advisor.pool_size(40, 6) == 6
    assert advisor.pool_size(3, 10) == 3
    assert advisor.pool_size(8, 0) == advisor.pool_size(1, 5) == 1


def test_sweep_pool_starts_no_more_processes_than_points(monkeypatch, fake_pool):
    """``sim sweep --backend pool --workers 30`` had started 30 processes for 9 points."""
    monkeypatch.setattr(sweep, "run_point", lambda cfg, p: [dict(p)])
    cfg = config_from_dict(CONFIG)
    rows, backend = sweep.run_sweep(cfg, backend="pool", workers=30)
    assert backend == "pool" and len(rows) == 2
    assert fake_pool.started == [2]


def test_sweep_refuses_workers_above_the_cap(capsys, tmp_path, monkeypatch, fake_pool):
    monkeypatch.setattr(sweep, "run_point", lambda cfg, p: pytest.fail("ran a point"))
    cfg = write_config(tmp_path)
    code, _, err = cassini(
        capsys, "sim", "sweep", str(cfg), "--out", str(tmp_path / "o"),
        "--backend", "pool", "--workers", str(MAX_WORKERS + 1),
    )  # fmt: skip
    assert code == 2
    assert "--workers" in error_line(err)
    assert not (tmp_path / "o").exists()


class FakeRay(types.ModuleType):
    """Just enough of ``ray`` for :func:`sweep._on_ray`: tasks run when submitted; it
    records ``ray.init``'s arguments and the most tasks in flight at once."""

    def __init__(self) -> None:
        super().__init__("ray")
        self.init_kwargs: dict | None = None
        self.running = False
        self.in_flight = self.most = 0

    def is_initialized(self) -> bool:
        return self.running

    def init(self, **kwargs) -> None:
        self.init_kwargs, self.running = kwargs, True

    def shutdown(self) -> None:
        self.running = False

    def remote(self, fn):
        ray = self

        class Remote:
            def remote(self, *args):
                ray.in_flight += 1
                ray.most = max(ray.most, ray.in_flight)
                return ("ref", fn(*args))

        return Remote()

    def wait(self, pending, num_returns=1):
        self.in_flight -= 1
        return pending[:1], pending[1:]

    def get(self, refs):
        return [r[1] for r in refs]


def test_sweep_on_ray_takes_workers(monkeypatch):
    """``--backend auto`` picking Ray had silently ignored ``--workers``: no more tasks are
    in flight at once (Ray keeps its own CPUs: ``num_cpus`` is refused when it joins a
    cluster already running on the host)."""
    ray = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(sweep, "run_point", lambda cfg, p: [dict(p)])
    cfg = config_from_dict(CONFIG | {"sweep": {"load": [0.7, 0.8, 0.9, 1.0]}})
    rows, backend = sweep.run_sweep(cfg, backend="auto", workers=2)
    assert backend == "ray" and [r["load"] for r in rows] == [0.7, 0.8, 0.9, 1.0]
    assert "num_cpus" not in ray.init_kwargs and ray.most == 2
    ray = FakeRay()  # a cluster at an address keeps its CPUs; the tasks are still bounded
    monkeypatch.setitem(sys.modules, "ray", ray)
    sweep.run_sweep(cfg, backend="ray", address="ray://head:10001", workers=3)
    assert "num_cpus" not in ray.init_kwargs and ray.most == 3


def test_sweep_help_says_what_workers_does_on_ray():
    text = " ".join(sweep_help().split())
    assert "Ray" in text and f"1..{MAX_WORKERS}" in text


def sweep_help() -> str:
    sim = next(
        a for a in cli.build_parser()._subparsers._group_actions[0].choices["sim"]._actions
        if a.dest == "sim_command"
    )  # fmt: skip
    parser = sim.choices["sweep"]
    return next(a.help for a in parser._actions if a.dest == "workers")


# -- 2. tracebacks --------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["score", "advise"])
def test_deeply_nested_json_is_one_line_naming_the_file(capsys, tmp_path, command):
    path = tmp_path / "deep.json"
    path.write_text(DEEP)
    code, out, err = cassini(capsys, command, str(path))
    assert code == 2 and out == ""
    line = error_line(err)
    assert str(path) in line and "nested too deeply" in line


def test_deeply_nested_json_on_stdin_is_one_line(capsys):
    code, _, err = cassini(capsys, "score", "-", stdin=DEEP)
    assert code == 2 and "nested too deeply" in error_line(err)


@pytest.mark.parametrize("source", ["worker-log", "recorder"])
def test_deeply_nested_log_line_is_one_line_naming_the_file(capsys, tmp_path, source):
    path = tmp_path / "log.jsonl"
    path.write_text(DEEP + "\n")
    code, out, err = cassini(capsys, "profile", "--from", source, str(path))
    assert code == 2 and out == ""
    line = error_line(err)
    assert str(path) in line and "line 1" in line and "nested too deeply" in line


@pytest.mark.parametrize("command", ["score", "profile"])
def test_a_too_long_integer_says_so_naming_the_file(capsys, tmp_path, command):
    path = tmp_path / "long.json"
    path.write_text('{"capacity_bps": ' + LONG_INT + ', "jobs": []}\n')
    argv = ["profile", "--from", "worker-log"] if command == "profile" else [command]
    code, _, err = cassini(capsys, *argv, str(path))
    assert code == 2
    line = error_line(err)
    assert str(path) in line and "too long" in line and "5000 digits" in line
    assert "set_int_max_str_digits" not in line


def test_a_too_long_integer_in_a_yaml_config_says_so(capsys, tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text(f"name: {LONG_INT}\n")
    code, _, err = cassini(capsys, "sim", "trace", str(path), "--out", str(tmp_path / "t.csv"))
    assert code == 2
    line = error_line(err)
    assert str(path) in line and "too long" in line and "set_int_max_str_digits" not in line


def test_deeply_nested_yaml_config_is_one_line(capsys, tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text(DEEP)
    code, _, err = cassini(capsys, "sim", "trace", str(path), "--out", str(tmp_path / "t.csv"))
    assert code == 2 and str(path) in error_line(err)


def no_draw(monkeypatch) -> None:
    """Drawing the jobs fails the test: a count past the bound is refused before."""
    from cassini.sim import config

    monkeypatch.setattr(config, "poisson_jobs", lambda *a, **k: pytest.fail("drew the jobs"))


@pytest.mark.parametrize("jobs", [99999999999999999999999, 1_000_001])
def test_sim_trace_bounds_the_poisson_job_count(capsys, tmp_path, monkeypatch, jobs):
    no_draw(monkeypatch)
    cfg = write_config(tmp_path, workload=poisson(jobs))
    code, _, err = cassini(capsys, "sim", "trace", str(cfg), "--out", str(tmp_path / "t.csv"))
    assert code == 2
    line = error_line(err)
    assert "workload.poisson.jobs" in line and str(cfg) in line and "1000000" in line
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_sim_run_and_sweep_refuse_a_job_count_past_the_bound(capsys, tmp_path, monkeypatch,
                                                              fake_pool, command):  # fmt: skip
    """One past the bound: refused as the config is read, before anything runs."""
    from cassini.sim.report import run as report

    no_draw(monkeypatch)
    monkeypatch.setattr(report, "simulate_config", lambda *a, **k: pytest.fail("simulated"))
    monkeypatch.setattr(sweep, "run_point", lambda *a: pytest.fail("ran a point"))
    cfg = write_config(tmp_path, workload=poisson(1_000_001))
    argv = ["sim", command, str(cfg), "--out", str(tmp_path / "o"), "--quiet"]
    code, _, err = cassini(capsys, *argv, *(["--backend", "pool"] if command == "sweep" else []))
    assert code == 2 and "workload.poisson.jobs" in error_line(err)


def test_poisson_jobs_refuses_a_huge_count_naming_the_field():
    from cassini.sim.workload import MAX_JOBS, check_job_count, load_library, poisson_jobs

    assert MAX_JOBS == 1_000_000 and check_job_count(MAX_JOBS) == MAX_JOBS
    with pytest.raises(InputError, match=r"workload\.poisson\.jobs"):
        check_job_count(MAX_JOBS + 1)
    with pytest.raises(InputError, match=r"workload\.poisson\.jobs"):  # was OverflowError
        poisson_jobs(10**23, 0.9, 16, load_library(), gpus={2: 1})


@pytest.mark.parametrize("plot", ["rate.txt", "rate", "folder"])
def test_profile_checks_the_plot_path_before_the_work(capsys, tmp_path, plot):
    """``--plot rate.txt`` had ended in matplotlib's traceback with ``--out`` unwritten;
    ``--plot d`` for a folder ``d`` had written ``d.png``."""
    (tmp_path / "folder").mkdir()
    out = tmp_path / "p.json"
    code, _, err = cassini(capsys, "profile", "--from", "recorder", str(RECORDER_LOG),
                           "--out", str(out), "--plot", str(tmp_path / plot))  # fmt: skip
    assert code == 2
    line = error_line(err)
    assert "--plot" in line and str(tmp_path / plot) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]  # no p.json, no .png


@pytest.mark.parametrize("plot", ["p.png", "p.svg", "p.PDF"])
def test_profile_draws_a_plot_whose_extension_names_a_format(capsys, tmp_path, plot):
    out, picture = tmp_path / "p.json", tmp_path / plot
    code, _, err = cassini(capsys, "profile", "--from", "recorder", str(RECORDER_LOG),
                           "--out", str(out), "--plot", str(picture))  # fmt: skip
    assert code == 0, err
    assert (tmp_path / plot).stat().st_size > 0 and (tmp_path / "p.json").exists()


# -- 3. output file modes -------------------------------------------------------------------
def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o027], ids=oct)
def test_replaced_gives_a_new_file_the_umasks_mode(tmp_path, umask, mask):
    umask(mask)
    with outputs.replaced(tmp_path / "new.txt") as tmp:
        tmp.write_text("x")
    assert mode(tmp_path / "new.txt") == 0o666 & ~mask


def test_replaced_keeps_an_existing_files_mode(tmp_path, umask):
    umask(0o077)
    path = tmp_path / "old.txt"
    for wanted in (0o644, 0o640, 0o664):
        path.write_text("old")
        path.chmod(wanted)
        with outputs.replaced(path) as tmp:
            tmp.write_text("new")
        assert path.read_text() == "new" and mode(path) == wanted


def test_outputs_of_profile_trace_and_convert_get_an_ordinary_mode(capsys, tmp_path, umask):
    umask(0o022)
    cfg = write_config(tmp_path)
    trace, converted, profile = tmp_path / "t.csv", tmp_path / "c.json", tmp_path / "p.json"
    assert cassini(capsys, "sim", "trace", str(cfg), "--out", str(trace))[0] == 0
    argv = ("sim", "trace", "convert", str(trace), "--out", str(converted))
    assert cassini(capsys, *argv)[0] == 0
    argv = ("profile", "--from", "recorder", str(RECORDER_LOG), "--out", str(profile))
    assert cassini(capsys, *argv)[0] == 0
    assert [mode(p) for p in (trace, converted, profile)] == [0o644] * 3
    umask(0o077)  # overwriting a 0644 file keeps 0644
    assert cassini(capsys, "sim", "trace", str(cfg), "--out", str(trace))[0] == 0
    assert mode(trace) == 0o644


# -- 4. standard input ----------------------------------------------------------------------
def test_top_level_help_names_the_commands_that_read_stdin():
    text = " ".join(cli.build_parser().format_help().split())
    for command in ("profile (not --from pcap)", "sim run", "sim trace convert", "sim topo show"):
        assert command in text


@pytest.mark.parametrize("source", ["recorder", "worker-log"])
def test_profile_reads_a_log_from_stdin(capsys, tmp_path, source):
    log = RECORDER_LOG
    if source == "worker-log":
        log = tmp_path / "w.jsonl"
        log.write_text("".join(
            json.dumps({"start": 100 + 0.1 * i, "comm_start": 100.06 + 0.1 * i,
                        "end": 100.1 + 0.1 * i, "bytes_sent": 5e6}) + "\n"
            for i in range(8)
        ))  # fmt: skip
    code, from_file, err = cassini(capsys, "profile", "--from", source, str(log))
    assert code == 0, err
    code, from_stdin, err = cassini(
        capsys, "profile", "--from", source, "-", stdin=log.read_bytes()
    )
    assert code == 0, err
    assert json.loads(from_stdin) == json.loads(from_file)


def test_profile_says_a_capture_is_read_from_a_file(capsys):
    code, _, err = cassini(capsys, "profile", "--from", "pcap", "-", "--src-ip", "10.0.0.1",
                           stdin=b"\xd4\xc3\xb2\xa1")  # fmt: skip
    assert code == 2 and "not standard input" in error_line(err)


def test_profile_from_empty_stdin_is_one_line(capsys):
    code, _, err = cassini(capsys, "profile", "--from", "recorder", "-", stdin=b"")
    assert code == 2 and "<stdin>: empty file" in error_line(err)


def test_sim_trace_convert_reads_stdin(capsys, tmp_path):
    cfg = write_config(tmp_path)
    trace = tmp_path / "t.csv"
    assert cassini(capsys, "sim", "trace", str(cfg), "--out", str(trace))[0] == 0
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert cassini(capsys, "sim", "trace", "convert", str(trace), "--out", str(a))[0] == 0
    code, _, err = cassini(capsys, "sim", "trace", "convert", "-", "--out", str(b),
                           stdin=trace.read_bytes())  # fmt: skip
    assert code == 0, err
    assert a.read_text() == b.read_text()
    cut = trace.read_bytes()[:100]  # a bad row: named as standard input, not a copy
    code, _, err = cassini(capsys, "sim", "trace", "convert", "-", "--out", str(b), stdin=cut)
    assert code == 0 and "bad row: <stdin>:" in err and "cassini-stdin" not in err
    code, _, err = cassini(capsys, "sim", "trace", "convert", "-", "--out", str(b), "--strict",
                           stdin=cut)  # fmt: skip
    assert code == 2 and error_line(err).startswith("cassini sim: error: <stdin>:")


def test_sim_topo_show_reads_stdin(capsys, tmp_path):
    code, from_file, _ = cassini(capsys, "sim", "topo", "show", str(HOST_TABLE), "--json")
    assert code == 0
    code, from_stdin, err = cassini(capsys, "sim", "topo", "show", "-", "--json",
                                    stdin=HOST_TABLE.read_bytes())  # fmt: skip
    assert code == 0, err
    a, b = json.loads(from_file), json.loads(from_stdin)
    assert b["source"] == {"hosts": "-"}
    assert {k: v for k, v in a.items() if k != "source"} == {
        k: v for k, v in b.items() if k != "source"
    }
    cluster = json.dumps({"cluster": CONFIG["cluster"]})
    code, from_stdin, err = cassini(capsys, "sim", "topo", "show", "-", "--json", stdin=cluster)
    assert code == 0, err
    assert json.loads(from_stdin)["hosts"] == 8
    code, _, err = cassini(capsys, "sim", "topo", "show", "-", stdin="host,gpus\nh1,8\n")
    assert code == 2 and error_line(err).startswith("cassini sim topo: error: <stdin>")
    # a YAML config whose first line is a comment with a comma is still a config
    commented = "# racks, servers and GPUs\n" + cluster
    code, from_stdin, err = cassini(capsys, "sim", "topo", "show", "-", "--json",
                                    stdin=commented)  # fmt: skip
    assert code == 0, err
    assert json.loads(from_stdin)["hosts"] == 8


def test_sim_trace_config_from_stdin(capsys, tmp_path):
    cfg = write_config(tmp_path)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert cassini(capsys, "sim", "trace", str(cfg), "--out", str(a))[0] == 0
    code, _, err = cassini(capsys, "sim", "trace", "-", "--out", str(b), stdin=cfg.read_bytes())
    assert code == 0, err
    assert a.read_text() == b.read_text()


def test_sim_run_from_stdin_finds_its_files_from_the_current_folder(capsys, tmp_path,
                                                                    monkeypatch):  # fmt: skip
    cfg = write_config(tmp_path)
    assert cassini(capsys, "sim", "trace", str(cfg), "--out", str(tmp_path / "jobs.csv"))[0] == 0
    text = json.dumps(CONFIG | {"workload": {"trace": "jobs.csv"}, "schedulers": ["themis"]})
    monkeypatch.chdir(tmp_path)
    code, out, err = cassini(capsys, "sim", "run", "-", "--out", "o", "--quiet",
                             "--format", "json", stdin=text)  # fmt: skip
    assert code == 0, err
    assert "themis" in json.loads(out)["summaries"]
    assert json.loads((tmp_path / "o" / "results.json").read_text())["workload"]["jobs"] == 12
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = cassini(capsys, "sim", "run", "-", "--out", "o", stdin=text)
    assert code == 2 and "jobs.csv" in error_line(err)


def test_sim_run_help_says_where_a_stdin_config_finds_its_files():
    from cassini.sim.cli import EPILOG

    assert "current folder" in EPILOG and "sim run -" in EPILOG


# -- 5. profile's options -------------------------------------------------------------------
def test_profile_refuses_an_empty_job_id(capsys, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = cassini(capsys, "profile", "--from", "recorder", str(RECORDER_LOG),
                           "--job-id", "", "--out", str(out))  # fmt: skip
    assert code == 2 and "--job-id" in error_line(err) and not out.exists()


@pytest.mark.parametrize("source", ["recorder", "worker-log", "pcap"])
@pytest.mark.parametrize("dt", ["-1", "0", "nan", "inf"])
def test_profile_checks_dt_s_for_every_source(capsys, source, dt):
    code, _, err = cassini(capsys, "profile", "--from", source, str(RECORDER_LOG),
                           f"--dt-s={dt}", "--src-ip", "10.0.0.1")  # fmt: skip
    assert code == 2 and "--dt-s" in error_line(err)


# -- 6. topo show --format, --version -------------------------------------------------------
def test_topo_show_takes_format_json_and_keeps_json(capsys):
    runs = [
        cassini(capsys, "sim", "topo", "show", str(HOST_TABLE), *flags)
        for flags in ((), ("--format", "table"), ("--format", "json"), ("--json",))
    ]
    assert all(code == 0 for code, _, _ in runs)
    assert runs[0][1] == runs[1][1] and not runs[0][1].startswith("{")
    assert json.loads(runs[2][1]) == json.loads(runs[3][1])


def test_version_is_the_installed_packages(capsys):
    from importlib import metadata

    code, out, _ = cassini(capsys, "--version")
    assert code == 0 and out.strip() == f"cassini {metadata.version('netaware-ml')}"


# -- 7. docs --------------------------------------------------------------------------------
def test_internals_shell_examples_name_files_that_exist_from_the_root(capsys, monkeypatch):
    """The advisor examples of docs/internals.md run from the repository root."""
    text = (ROOT / "docs" / "internals.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    named = []
    for line in "".join(blocks).splitlines():
        words = line.split("#")[0].split()
        if not words or words[0] not in ("cassini", "cat"):
            continue
        for before, word in zip(["", *words], words, strict=False):
            if re.search(r"\.(json|ya?ml|csv)$", word) and before != "--out":
                named.append(word)
    assert "examples/request.json" in named and "examples/link.json" in named
    missing = [w for w in named if not (ROOT / w).exists()]
    assert not missing, f"docs/internals.md names files missing from the root: {missing}"
    monkeypatch.chdir(ROOT)
    code, out, err = cassini(capsys, "advise", "examples/request.json")
    assert code == 0 and json.loads(out)["best"], err
    code, out, err = cassini(capsys, "score", "-", "--precision-deg", "2",
                             stdin=(ROOT / "examples" / "link.json").read_bytes())  # fmt: skip
    assert code == 0 and "score" in json.loads(out), err


# -- 8. sim trace's flags -------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags", [("--strict",), ("--seed", "1"), ("--format", "csv"), ("--profiles", "x.json")]
)
def test_sim_trace_config_refuses_convert_only_flags(capsys, tmp_path, flags):
    cfg = write_config(tmp_path)
    out = tmp_path / "t.csv"
    code, _, err = cassini(capsys, "sim", "trace", str(cfg), "--out", str(out), *flags)
    assert code == 2 and flags[0] in error_line(err) and "convert" in error_line(err)
    assert not out.exists()


def test_sim_trace_convert_refuses_a_negative_seed(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,arrival_s,gpus,iterations,model\nj0,0,2,20,resnet50\n")
    argv = ("sim", "trace", "convert", str(trace), "--out", str(tmp_path / "o.csv"))
    code, _, err = cassini(capsys, *argv, "--seed", "-1")
    assert code == 2 and "--seed" in error_line(err)
    assert cassini(capsys, *argv, "--seed", "3")[0] == 0


def test_an_impossible_yaml_date_is_one_line_naming_the_file(tmp_path):
    """yaml's date constructor raised a plain ValueError that parse_yaml let through."""
    from cassini.files import parse_yaml

    with pytest.raises(InputError, match="malformed YAML: day is out of range") as e:
        parse_yaml("seed: 2001-02-30\n", "c.yaml")
    assert e.value.field == "c.yaml"


def test_a_library_call_starts_at_most_max_workers_processes():
    """The 64 was enforced by the command lines only: ``advise(..., workers=100000)``
    from Python could still start one process per link problem."""
    from cassini.advisor import pool_size
    from cassini.files import MAX_WORKERS as LIMIT

    assert pool_size(100_000, 10_000) == LIMIT == MAX_WORKERS
    assert pool_size(40, 6) == 6 and pool_size(0, 6) == 1
