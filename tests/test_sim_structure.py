"""The simulator's shape (issue 32): no import circle in ``cassini/sim``, its modules and
every function of the project's code within their size limits, one network seam, and no
compatibility facade left for imports to go through."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cassini.sim.network import NETWORKS
from cassini.sim.options import NETWORK_MODELS

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "cassini" / "sim"
MODULE_LINES = 400
FUNCTION_LINES = 80
#: the project's code outside the tests: no function in it over FUNCTION_LINES lines
CODE = ("cassini", "mltcp", "testbed", "experiments", "benchmarks", "examples")
#: Known exceptions, each at its size today: a listed module or function may shrink
#: (then drop it from here) but not grow.  Issue 32 wanted these empty, and they are.
LONG_MODULES: dict[str, int] = {}
LONG_FUNCTIONS: dict[str, int] = {}
#: facades deleted by issue 32: code imports the real modules (mltcp.marks or mltcp.admin,
#: testbed.run), and none of these may come back
RETIRED = ("mltcp.loader", "testbed.runner", "cassini.server")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports anywhere in its text (at the top,
    in functions and under ``TYPE_CHECKING`` alike); ``from pkg import sub`` counts as
    importing ``pkg.sub`` only."""
    files = {module_name(f): f for f in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    if sub in files:
                        edges.add(sub)
                    elif node.module in files:
                        edges.add(node.module)
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in files}
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_simulator() -> None:
    assert cycles(import_graph(SIM)) == []


@pytest.mark.parametrize("package", ["cassini", "mltcp", "testbed", "experiments"])
def test_no_import_circle_in_the_project(package) -> None:
    """Nor through the packages around it (``cassini.packet.run`` once reached the
    engine, whose packet model imported it back)."""
    assert cycles(import_graph(ROOT / package)) == []


def imported_names(path: Path) -> set[str]:
    """Every module ``path`` names in an import statement, ``from pkg import sub`` as both
    ``pkg`` and ``pkg.sub``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_no_retired_facade_exists_or_is_imported() -> None:
    for name in RETIRED:
        assert not (ROOT / (name.replace(".", "/") + ".py")).exists(), name
        assert not (ROOT / name.replace(".", "/")).is_dir(), name
    for top in (*CODE, "tests"):
        for path in (ROOT / top).rglob("*.py"):
            back = imported_names(path) & set(RETIRED)
            assert not back, f"{path.relative_to(ROOT)} imports {sorted(back)}"


def function_sizes(path: Path, rel: str) -> dict[str, int]:
    """``rel:name`` -> lines of every function (methods and nested ones too) in ``path``."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            out[f"{rel}:{node.name}"] = node.end_lineno - node.lineno + 1
    return out


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines of every module of ``cassini/sim`` and of every function of :data:`CODE`
    (keys relative to ``cassini/sim`` there, to the checkout elsewhere)."""
    modules, functions = {}, {}
    for path in sorted(SIM.rglob("*.py")):
        modules[path.relative_to(SIM).as_posix()] = len(path.read_text().splitlines())
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            base = SIM if path.is_relative_to(SIM) else ROOT
            functions |= function_sizes(path, path.relative_to(base).as_posix())
    return modules, functions


def test_function_sizes_sees_methods_and_nested_functions(tmp_path) -> None:
    code = "class A:\n    def m(self):\n        def inner():\n            return 1\n" + (
        "        x = 1\n" * 90
    )
    (tmp_path / "a.py").write_text(code)
    found = function_sizes(tmp_path / "a.py", "a.py")
    assert found["a.py:m"] > FUNCTION_LINES and found["a.py:inner"] == 2


def test_modules_and_functions_stay_within_their_limits() -> None:
    """No module of ``cassini/sim`` over 400 lines and no function of the project's code
    (outside the tests) over 80, but the known exceptions at their sizes."""
    modules, functions = sizes()
    assert any(k.startswith("network/") for k in functions) and any(
        k.startswith("testbed/") for k in functions
    )
    for sizes_now, limit, known in (
        (modules, MODULE_LINES, LONG_MODULES),
        (functions, FUNCTION_LINES, LONG_FUNCTIONS),
    ):
        over = {k: n for k, n in sizes_now.items() if n > limit}
        grown = {k: n for k, n in over.items() if n > known.get(k, limit)}
        assert not grown, f"over {limit} lines: {grown}"
        stale = sorted(k for k in known if sizes_now.get(k, 0) <= limit)
        assert not stale, f"within {limit} lines now, drop from the known list: {stale}"


def test_every_simulator_module_opens_with_one_or_two_sentences() -> None:
    """Each module of ``cassini/sim`` has a head of one paragraph of at most two
    sentences; longer notes live in docs/internals.md ("Simulator module notes")."""
    long = {}
    for path in sorted(SIM.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        sentences = len(re.findall(r"[.!?](?=\s+[A-Z`(]|\s*$)", doc))
        if not doc or "\n\n" in doc or sentences > 2:
            long[str(path.relative_to(SIM))] = doc[:80]
    assert not long, long


def test_every_network_model_is_named_once() -> None:
    assert tuple(NETWORKS) == NETWORK_MODELS


def test_the_engine_never_asks_which_network_model_it_has() -> None:
    tree = ast.parse((SIM / "engine.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            text = ast.unparse(node)
            assert "self.net" not in text, text
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance":
            assert "Network" not in ast.unparse(node), ast.unparse(node)
    assert "ContinuousNetwork" not in (SIM / "engine.py").read_text()


def test_parts_and_models_never_write_to_the_engine() -> None:
    """No ``sim.x = ...`` / ``sim.x += ...`` (nor ``state.x``) in the parts and network
    models: they read the :class:`~cassini.sim.state.ClusterState` and answer."""
    for path in [*(SIM / "parts").rglob("*.py"), *(SIM / "network").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign | ast.AnnAssign)
                else []
            )
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                    assert t.value.id not in ("sim", "state"), (path.name, ast.unparse(t))


def test_a_scheduler_holds_its_table_entries() -> None:
    from cassini.sim.parts.sharing import SHARINGS, Sharing
    from cassini.sim.parts.timing import TIMINGS
    from cassini.sim.schedulers import Scheduler

    s = Scheduler.parse("themis+crux+mltcp+cassini")
    assert s.timing is TIMINGS["held"] and s.held
    assert s.sharing == Sharing(mltcp=True, priority=True) and s.mltcp and s.priority
    plain = Scheduler.parse("themis")
    assert plain.sharing == SHARINGS["maxmin"] and plain.timing is TIMINGS["free"]
    assert not (plain.mltcp or plain.priority or plain.held)


def spy_job_values(monkeypatch, network: str, field: str, default: float) -> dict:
    """Per job, the ``field`` (``share`` or ``priority``) the fluid model ``network``
    is handed: each window's ``FlowJob``'s, or each ``FlowState.add`` keyword (where a
    value other than ``default`` needs the state's general-form solve)."""
    from cassini.sim.network import continuous, windows

    handed: dict = {}
    if network == "windows":
        real_simulate = windows.simulate

        def simulate(flows, *a, **k):
            handed.update({f.job_id: getattr(f, field) for f in flows})
            return real_simulate(flows, *a, **k)

        monkeypatch.setattr(windows, "simulate", simulate)
    else:
        real_add = continuous.FlowState.add

        def add(self, job_id, *a, **k):
            value = k.get(field, default)
            assert value == default or self.rule[2], f"a state with {field} solves in general form"
            handed[job_id] = value
            return real_add(self, job_id, *a, **k)

        monkeypatch.setattr(continuous.FlowState, "add", add)
    return handed


def spy_model_keywords(monkeypatch, network: str, *names: str) -> list[dict]:
    """The keywords ``names`` of every window the fluid model ``network`` simulates
    (``simulate``) or of its flow state (``FlowState``), one dict per call."""
    from cassini.sim.network import continuous, windows

    seen: list[dict] = []
    if network == "windows":
        real_simulate = windows.simulate

        def simulate(*a, **k):
            seen.append({n: k.get(n) for n in names})
            return real_simulate(*a, **k)

        monkeypatch.setattr(windows, "simulate", simulate)
    else:
        real_init = continuous.FlowState.__init__

        def init(self, *a, **k):
            seen.append({n: k.get(n) for n in names})
            real_init(self, *a, **k)

        monkeypatch.setattr(continuous.FlowState, "__init__", init)
    return seen


def run_checked(scheduler: str, options):
    """``scheduler``'s run of :func:`small_jobs` (24), every job finished no faster than
    its dedicated pace."""
    from cassini.sim.engine import run

    cluster, jobs, library = small_jobs(24)
    result = run(cluster, jobs, library, scheduler, options=options, seed=1)
    assert sorted(r.job_id for r in result.jobs) == sorted(j.job_id for j in jobs)
    assert all(r.slowdown >= 1 - 1e-9 for r in result.jobs)
    return result


def assert_differ(result, other) -> None:
    """Some job's slowdown differs between two runs of the same jobs."""
    by_id = {r.job_id: r.slowdown for r in result.jobs}
    assert any(abs(by_id[r.job_id] - r.slowdown) > 1e-9 for r in other.jobs)


def packet_refuses(scheduler: str, name: str) -> None:
    """The packet model refuses ``scheduler`` naming its sharing rule ``name``."""
    from cassini.errors import InputError
    from cassini.sim.engine import run
    from cassini.sim.options import SimOptions

    cluster, jobs, library = small_jobs(24)
    with pytest.raises(InputError, match=f"sharing rule.*{name}"):
        run(cluster, jobs, library, scheduler, options=SimOptions(network="packet"), seed=1)


def size_weight(spec) -> float:
    """docs/extending.md's worked example of a sharing rule: a job's flows weighted by
    its GPU count."""
    return float(spec.gpus)


@pytest.mark.parametrize("network", ["windows", "continuous"])
def test_a_weighting_sharing_rule_is_one_table_entry(monkeypatch, network) -> None:
    """A rule that weights jobs is its ``SHARINGS`` entry and its weight function, and
    nothing else: the name parses and prints back, both fluid models hand every job its
    weight, every job finishes no faster than its dedicated pace, and the packet model
    refuses it by name."""
    from cassini.sim.options import SimOptions
    from cassini.sim.parts.sharing import SHARINGS, Sharing
    from cassini.sim.schedulers import Scheduler

    monkeypatch.setitem(SHARINGS, "size", Sharing(weight=size_weight))
    s = Scheduler.parse("themis+mltcp+size")
    assert s.sharing.weighted == ("size",) and s.mltcp
    assert s.canonical == "themis+mltcp+size"
    assert Scheduler.parse(s.canonical).sharing == s.sharing
    handed = spy_job_values(monkeypatch, network, "share", 1.0)
    options = SimOptions(network=network)
    weighted = run_checked("themis+random+size", options)
    gpus = {j.job_id: j.gpus for j in small_jobs(24)[1]}
    assert handed and all(handed[j] == gpus[j] for j in handed), handed
    assert len(set(handed.values())) > 1  # jobs of different sizes met on a link
    assert_differ(weighted, run_checked("themis+random", options))
    packet_refuses("themis+size", "size")


def rising_weight(x: float) -> float:
    """docs/extending.md's worked example of a progress rule: a flow's weight grows
    from 1 to 4 as its iteration's bytes go out (MLTCP's idea, another curve)."""
    return 1.0 + 3.0 * x


@pytest.mark.parametrize("network", ["windows", "continuous"])
def test_a_progress_sharing_rule_is_one_table_entry(monkeypatch, network) -> None:
    """A rule that weights flows by their iteration's progress is its ``SHARINGS``
    entry and its function, and nothing else: the name parses and prints back, both
    fluid models are handed the function (and MLTCP's parameters only under
    ``mltcp``), every job finishes no faster than its dedicated pace, the results differ
    from max-min, and the packet model refuses it by name."""
    from cassini.errors import InputError
    from cassini.sim.engine import run
    from cassini.sim.options import SimOptions
    from cassini.sim.parts.sharing import SHARINGS, Sharing
    from cassini.sim.schedulers import Scheduler

    monkeypatch.setitem(SHARINGS, "rising", Sharing(progress=rising_weight))
    s = Scheduler.parse("themis+rising+cassini")
    assert s.sharing.progressing == ("rising",) and s.sharing.dynamic and not s.mltcp
    assert s.canonical == "themis+cassini+rising"
    assert Scheduler.parse(s.canonical).sharing == s.sharing
    handed = spy_model_keywords(monkeypatch, network, "mltcp", "progress")
    options = SimOptions(network=network)
    rising = run_checked("themis+random+rising", options)
    assert handed and all(k["mltcp"] is None and k["progress"] is not None for k in handed)
    assert all(k["progress"](x) == rising_weight(x) for k in handed for x in (0.0, 0.5, 1.0))
    assert_differ(rising, run_checked("themis+random", options))
    handed.clear()
    cluster, jobs, library = small_jobs(24)
    run(cluster, jobs, library, "themis+random+mltcp+rising", options=options, seed=1)
    assert handed and all(k["mltcp"] is not None and k["progress"] is not None for k in handed)
    packet_refuses("themis+rising", "rising")
    monkeypatch.setitem(SHARINGS, "bad", Sharing(progress=lambda x: 1.0 - x))  # 0 at the end
    with pytest.raises(InputError, match="sharing rule 'bad' gave weight 0.0 at progress 1.0"):
        run(cluster, jobs, library, "themis+random+bad", options=options, seed=1)


def small_first(spec) -> int:
    """docs/extending.md's worked example of an ordering rule: jobs of up to 8 GPUs are
    served strictly before larger ones."""
    return 0 if spec.gpus <= 8 else 1


@pytest.mark.parametrize("network", ["windows", "continuous"])
def test_an_ordering_sharing_rule_is_one_table_entry(monkeypatch, network) -> None:
    """A rule that orders jobs strictly is its ``SHARINGS`` entry and its level
    function, and nothing else: the name parses and prints back, both fluid models hand
    every job its class, the results report it and differ from max-min, it refuses to
    combine with Crux's ``priority``, and the packet model refuses it by name."""
    from cassini.errors import InputError
    from cassini.sim.engine import run
    from cassini.sim.options import SimOptions
    from cassini.sim.parts.sharing import SHARINGS, Sharing
    from cassini.sim.schedulers import Scheduler

    monkeypatch.setitem(SHARINGS, "smallfirst", Sharing(level=small_first))
    s = Scheduler.parse("themis+smallfirst+mltcp")
    assert s.sharing.ordering == ("smallfirst",) and s.sharing.strict and not s.priority
    assert s.canonical == "themis+mltcp+smallfirst"
    assert Scheduler.parse(s.canonical).sharing == s.sharing
    with pytest.raises(InputError, match="priority, smallfirst each order jobs strictly"):
        Scheduler.parse("themis+crux+smallfirst")
    handed = spy_job_values(monkeypatch, network, "priority", 0)
    options = SimOptions(network=network)
    result = run_checked("themis+random+smallfirst", options)
    level = {j.job_id: small_first(j) for j in small_jobs(24)[1]}
    assert handed and all(handed[j] == level[j] for j in handed), handed
    assert set(handed.values()) == {0, 1}  # both classes met on a link
    assert all(r.priority_level == level[r.job_id] for r in result.jobs)
    assert_differ(result, run_checked("themis+random", options))
    packet_refuses("themis+smallfirst", "smallfirst")
    cluster, jobs, library = small_jobs(24)
    for bad in (-1, 0.5, True):
        monkeypatch.setitem(SHARINGS, "bad", Sharing(level=lambda _, v=bad: v))
        with pytest.raises(InputError, match=f"sharing rule 'bad' gave job .* level {bad!r}"):
            run(cluster, jobs, library, "themis+random+bad", options=options, seed=1)


def test_a_sharing_weight_is_checked_and_an_entry_answers_alone(monkeypatch) -> None:
    from cassini.errors import InputError
    from cassini.sim.jobspec import JobSpec
    from cassini.sim.parts.sharing import SHARINGS, Sharing
    from cassini.sim.schedulers import Scheduler

    spec = JobSpec("j1", 0.0, 4, 10, "bert")
    assert Sharing(weight=size_weight).share(spec) == 4.0
    assert Scheduler.parse("themis+mltcp").sharing.share(spec) == 1.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        monkeypatch.setitem(SHARINGS, "bad", Sharing(weight=lambda _, w=bad: w))
        with pytest.raises(InputError, match="sharing rule 'bad' gave job 'j1'"):
            Scheduler.parse("themis+bad").sharing.share(spec)


#: docs/extending.md's worked example of a timing rule: held with a looser tolerance, in
#: smaller groups
LOOSE = {"held": True, "tolerance": 0.5, "group_limit": 2}


@pytest.mark.parametrize("network", ["windows", "continuous"])
def test_a_timing_rule_is_one_table_entry(monkeypatch, network) -> None:
    """A timing rule is its ``TIMINGS`` entry, and nothing else: the name parses beside
    ``cassini`` (replacing the bundle's ``held``) and prints back, both fluid models use
    its tolerance and group limit, every job finishes no faster than its dedicated pace,
    and the results differ from plain ``held``."""
    from cassini.sim.options import SimOptions
    from cassini.sim.parts.timing import TIMINGS, Timing
    from cassini.sim.routes import Routes
    from cassini.sim.schedulers import Scheduler

    monkeypatch.setitem(TIMINGS, "loose", Timing(**LOOSE))
    s = Scheduler.parse("themis+loose+cassini")
    assert (s.placement, s.timing, s.canonical) == ("cassini", TIMINGS["loose"],
                                                    "themis+cassini+loose")  # fmt: skip
    assert Scheduler.parse(s.canonical).timing is TIMINGS["loose"]
    limits: list[int | None] = []
    real_component = Routes.component

    def component(self, seeds, limit=None):
        limits.append(limit)
        return real_component(self, seeds, limit)

    monkeypatch.setattr(Routes, "component", component)
    handed = spy_model_keywords(monkeypatch, network, "tolerance")
    options = SimOptions(network=network)
    loose = run_checked("themis+cassini+loose", options)
    assert handed and {k["tolerance"] for k in handed} == {LOOSE["tolerance"]}
    assert {x for x in limits if x is not None} == {LOOSE["group_limit"]}
    limits.clear()
    handed.clear()
    held = run_checked("themis+cassini", options)
    assert {k["tolerance"] for k in handed} == {TIMINGS["held"].tolerance}
    assert {x for x in limits if x is not None} == {TIMINGS["held"].group_limit}
    assert_differ(loose, held)


def test_cassini_runs_free_when_a_timing_part_says_so() -> None:
    """``themis+cassini+free``: CASSINI's placement, jobs not held to their shifts."""
    from cassini.errors import InputError
    from cassini.sim.parts.timing import TIMINGS, Timing
    from cassini.sim.schedulers import Scheduler

    s = Scheduler.parse("themis+cassini+free")
    assert (s.placement, s.held, s.canonical) == ("cassini", False, "themis+cassini+free")
    assert Scheduler.parse("themis+held+cassini").canonical == "themis+cassini"
    with pytest.raises(InputError, match="2 timing parts"):
        Scheduler.parse("themis+cassini+free+held")
    for bad in ({"tolerance": 1.0}, {"tolerance": float("nan")}, {"group_limit": 0}):
        with pytest.raises(InputError, match="timing"):
            Timing(held=True, **bad)
    assert TIMINGS["held"].name == "held" and Timing(held=True).name == "held"
    with pytest.raises(InputError, match="not an entry of TIMINGS"):
        Timing(held=True, tolerance=0.2).name  # noqa: B018


@settings(max_examples=300, deadline=None)
@given(
    grid=st.floats(1e-3, 10),
    anchor=st.floats(-10, 10),
    slot=st.integers(-5, 50),
    late=st.floats(-0.99, 20),
    tolerance=st.floats(0, 0.99),
)
def test_the_slot_rule_begins_the_next_slot_or_the_first_not_yet_begun(
    grid, anchor, slot, late, tolerance
) -> None:
    """:func:`next_slot`: a job that ended ``late`` periods after its next slot's start
    begins that slot when at most ``tolerance`` late, else the first slot at or after
    its end, both kernels (compiled and plain) alike."""
    from cassini.sim.network import rates

    assume(abs(late - tolerance) > 1e-6)  # not on the boundary, where rounding decides
    t = anchor + (slot + 1 + late) * grid
    for rule in {rates.next_slot, getattr(rates.next_slot, "py_func", rates.next_slot)}:
        k, due = rule(t, anchor, slot, grid, tolerance)
        assert due == anchor + k * grid
        if late <= tolerance:
            assert k == slot + 1, (t, k)
        else:
            assert k > slot + 1 and due >= t - 1e-9 * grid * (1 + abs(k))
            assert anchor + (k - 1) * grid < t + 1e-9 * grid


def small_jobs(n: int):
    from cassini.sim.topology import Cluster
    from cassini.sim.workload import load_library, poisson_jobs

    library = load_library()
    cluster = Cluster(racks=4, servers_per_rack=2, gpus_per_server=4, oversubscription=4)
    jobs = poisson_jobs(n, 0.9, cluster.gpus, library, gpus={4: 1, 8: 1, 12: 1}, seed=3)
    return cluster, jobs, library


#: the fluid models; ``packet`` (ns-3, each window a packet-level run) has its own case in
#: tests/test_packet_run.py: its phases run at line rate, not at the profiles' measured
#: rates, so a job there can beat its profile's period and ``ideal`` is measured, not given
FLUID_NETWORKS = sorted(set(NETWORKS) - {"packet"})


@pytest.mark.parametrize("network", FLUID_NETWORKS)
@pytest.mark.parametrize("scheduler", ["themis", "themis+cassini", "themis+crux+mltcp"])
def test_every_network_model_runs_every_job_through_the_seam(network, scheduler) -> None:
    """Each model behind the engine's one seam finishes every job once, never faster
    than its dedicated pace, and with no congestible link (``ideal``) exactly at it."""
    from cassini.sim.engine import run
    from cassini.sim.options import SimOptions

    cluster, jobs, library = small_jobs(24)
    options = SimOptions(network=network)
    result = run(cluster, jobs, library, scheduler, options=options, seed=1)
    assert sorted(r.job_id for r in result.jobs) == sorted(j.job_id for j in jobs)
    assert all(r.slowdown >= 1 - 1e-9 for r in result.jobs)
    assert any(r.slowdown > 1 + 1e-6 for r in result.jobs)  # the fabric does congest
    ideal = run(cluster, jobs, library, "ideal", options=options, seed=1)
    assert all(abs(r.slowdown - 1) < 1e-9 for r in ideal.jobs)
