"""Shared fixtures and the prerequisite rule.

Every test that needs something this machine may lack (root, a kernel feature, a tool, an
optional Python package) asks through :func:`require` / :func:`require_module` /
:func:`require_tool`: without the prerequisite the test skips loudly, and under ``CI=true``
(any case) it fails instead.  ``tests/test_meta.py`` fails if a test skips any other way.

Under ``CI`` (set to anything but empty/``0``/``false``) hypothesis runs the ``ci`` profile
registered here: derandomized, no per-example deadline, so CI never fails on a lucky draw or a
slow example.  (Hypothesis itself also picks a profile named ``ci`` whenever ``CI`` is set.)
The ``long`` profile (``pytest --hypothesis-profile long``) runs the simulator config fuzzer
at 5,000 random examples (docs/testing.md).

Root tests (marker ``root``, run as root) own the host: before the first one this process
takes the host lock (:mod:`testbed.hostlock`, the one a testbed cluster takes), printing
that it waits when another suite or a testbed run holds it, and keeps it to the end.  The
names they create (network namespaces, cgroups) carry :data:`RUN_TAG` (:func:`run_name`),
so two suites never share one; after every root test no process of this run is left
outside the init network namespace and ``ip netns`` lists none of this run's names.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings


def in_ci() -> bool:
    """Whether ``CI=true`` (case-insensitive) is set: missing prerequisites then fail."""
    return os.environ.get("CI", "").strip().lower() == "true"


def require(condition: bool, what: str) -> None:
    """Skip (or, under CI=true, fail) when a prerequisite named ``what`` is missing.

    Works at module level too (a module-level miss skips the whole file)."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI=true and a prerequisite is missing: {what}", pytrace=False)
    pytest.skip(f"SKIPPED (prerequisite missing): {what}", allow_module_level=True)


def require_module(name: str, why: str = "") -> ModuleType:
    """Import and return module ``name``; a missing module goes through :func:`require`."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        require(False, f"Python module {name} ({why or e})")
        raise  # unreachable: require skipped or failed


class LazyModule:
    """Module ``name``, imported through :func:`require_module` at its first use instead
    of at collection: every pytest process collects every test file, and a heavy import
    there (torch: ~4 s) was paid by each, whether or not it ran the file's tests.
    Reads of public attributes, writes (``monkeypatch.setattr``) and deletes go to the
    module; a private name (``_x``) reads as missing, without importing it."""

    __slots__ = ("_lazy",)

    def __init__(self, name: str, why: str = "") -> None:
        object.__setattr__(self, "_lazy", (name, why))

    @property
    def __dict__(self) -> dict[str, Any]:  # what monkeypatch reads an old value from
        return self._module().__dict__

    def _module(self) -> ModuleType:
        name, why = object.__getattribute__(self, "_lazy")
        return require_module(name, why)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # pytest's collection probes (__test__, fixture markers)
            raise AttributeError(attr)
        return getattr(self._module(), attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._module(), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(self._module(), attr)


def require_tool(name: str, hint: str = "run make setup") -> str:
    """Path of executable ``name`` on PATH; a missing tool goes through :func:`require`."""
    path = shutil.which(name)
    require(path is not None, f"{name} ({hint})")
    assert path is not None
    return path


def require_root() -> None:
    """Effective uid 0, through :func:`require`."""
    require(os.geteuid() == 0, "root")


RUN_TAG = f"t{os.getpid()}"  # this test run; in the names of what its root tests create
RUN_ENV = "PYTEST_RUN_TAG"  # every process this run starts inherits it: that is "ours"
os.environ[RUN_ENV] = RUN_TAG
ROOT = Path(__file__).resolve().parent.parent


def run_name(prefix: str) -> str:
    """``prefix`` made this run's own (netns, cgroup, ... names): ``<prefix>_t<pid>``."""
    return f"{prefix}_{RUN_TAG}"


def our_netns() -> list[str]:
    """Network namespaces named by this run (``ip netns``)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line and RUN_TAG in line.split()[0]]


def stray_processes() -> list[str]:
    """Processes of this run (they carry RUN_ENV=RUN_TAG) in another network namespace
    than this one's (the init one), as ``pid command``."""
    here = os.readlink("/proc/self/ns/net")
    tag = f"{RUN_ENV}={RUN_TAG}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if tag not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if os.readlink(entry / "ns" / "net") == here:
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
        except OSError:  # gone meanwhile, or a zombie without namespaces
            continue
        found.append(f"{entry.name} {command}")
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a root test's fixtures: take the host lock for the rest of the session.
    Not in a pytest-xdist worker: two workers each holding it for their session wait on
    each other for ever (one idle, its lock held), so a root test there fails at once."""
    if item.get_closest_marker("root") is None or os.geteuid() != 0:
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail(
            "root tests hold the host lock for the whole session, so pytest-xdist workers "
            "would wait on each other for ever: run them without -n (-p no:xdist), as "
            "scripts/test.sh's phase 2 does, or deselect them with -m 'not root'",
            pytrace=False,
        )
    from testbed import hostlock

    def say(message: str) -> None:  # on the terminal, past pytest's output capture
        capture = item.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            print(f"\n{message}: this run waits", file=sys.stderr, flush=True)

    if not hostlock.held():
        hostlock.acquire(f"pytest -m root in {ROOT}", say=say)


@pytest.fixture(autouse=True, scope="session")
def _state_files_of_our_own(tmp_path_factory: pytest.TempPathFactory):
    """``cassini serve`` without ``--state`` opens ``$XDG_STATE_HOME/cassini/serve.sqlite``:
    each test session (each pytest-xdist worker) gets a folder of its own, so no test
    opens the user's real state file, and two workers' servers do not refuse each
    other's ("in use by another cassini serve", seen 2026-11-29 with -n 2)."""
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg_state"))
    yield
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old


@pytest.fixture(autouse=True)
def _signal_dispositions_are_left_as_found():
    """Every test leaves SIGINT, SIGTERM and SIGHUP as it found them: a handler or an
    ignore left behind is inherited by what later tests start (an ignored SIGINT made a
    later test's Ctrl-C of its child do nothing, in one pytest-xdist worker of a run)."""
    import signal

    wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {s: signal.getsignal(s) for s in wanted}
    ignored = _ignored_signals()  # the kernel's view: C code may ignore one, unseen above
    yield
    changed = {s.name: signal.getsignal(s) for s in wanted if signal.getsignal(s) != before[s]}
    changed |= {f"{s.name} (ignored by the kernel)": True for s in wanted
                if (s in _ignored_signals()) != (s in ignored)}  # fmt: skip
    for s in wanted:  # restored, so that one test's leak fails that test only
        if before[s] is not None:  # None: set outside Python, cannot be put back from here
            signal.signal(s, before[s])
    assert not changed, f"signal dispositions left changed: {changed}"


def _ignored_signals() -> set[int]:
    """The signals this process ignores (``SigIgn`` of /proc/self/status; empty where
    there is no /proc)."""
    try:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines()
                    if x.startswith("SigIgn:"))  # fmt: skip
    except (OSError, StopIteration):
        return set()
    mask = int(line.split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


@pytest.fixture(autouse=True)
def _root_test_leaves_no_namespace_behind(request: pytest.FixtureRequest):
    """After every root test: no process of ours outside the init network namespace, no
    network namespace of ours (a few seconds allowed for killed processes to go)."""
    yield
    if request.node.get_closest_marker("root") is None or os.geteuid() != 0:
        return
    deadline = time.monotonic() + 5.0
    while True:
        stray, named = stray_processes(), our_netns()
        if not stray and not named:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"left behind: processes {stray}, network namespaces {named}")
        time.sleep(0.1)


# -- fixtures shared by the root tests -----------------------------------------------------
@pytest.fixture
def testbed_host():
    """Root and the testbed's tools (through require); after the test, no testbed
    interface left behind."""
    from testbed.net import leftovers

    require_root()
    for tool in ("mnexec", "tc", "tcpdump", "ethtool"):
        require_tool(tool)
    yield
    assert leftovers() == [], "testbed interfaces left behind"


@pytest.fixture
def run_cgroup():
    """A fresh cgroup v2 directory of this run (``<root>/mltcp_cg_t<pid>``, mounting a
    cgroup2 hierarchy if the host has none).  Teardown kills what is in it (only this
    run's processes can be) and removes it, if a test has not already."""
    mounts = [ln.split() for ln in Path("/proc/self/mounts").read_text().splitlines()]
    root = next((m[1] for m in mounts if m[2] == "cgroup2"), None)
    mounted = None
    if root is None:
        mounted = tempfile.mkdtemp(prefix="mltcp-cg2-")
        subprocess.run(["mount", "-t", "cgroup2", "none", mounted], check=True)
        root = mounted
    path = Path(root) / run_name("mltcp_cg")
    path.mkdir(exist_ok=True)
    try:
        yield path
    finally:
        if path.exists():
            for pid in (path / "cgroup.procs").read_text().split():
                subprocess.run(["kill", "-9", pid], capture_output=True)
            path.rmdir()
        if mounted:
            subprocess.run(["umount", mounted], check=False)
            os.rmdir(mounted)


settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
#: ``pytest --hypothesis-profile long``: the simulator config fuzzer (tests/test_sim_fuzz.py)
#: at 5,000 examples drawn at random (its default, and CI's, is 500 derandomized); other
#: tests that set no example count of their own also run 5,000
settings.register_profile("long", max_examples=5000, deadline=None, print_blob=True)
if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
    settings.load_profile("ci")



def slow_first(items: list, workers: int) -> list:
    """``items`` reordered for ``workers`` pytest-xdist workers.  Work stealing hands each
    worker one contiguous chunk of the collection and moves tests from a chunk's end, so
    the test files holding a ``slow`` test (whole, to keep their module fixtures to one
    set-up) go to the starts of the chunks, round robin, and the rest keep their order.  A
    slow test left for the end would run alone while the other workers wait (the longest
    take 20-40 s here).  The files holding a ``same_worker(name)`` test go together, at
    the start of one chunk, so that one worker loads the named resource once."""
    files: dict[str, list] = {}
    for it in items:
        files.setdefault(it.nodeid.split("::", 1)[0], []).append(it)
    shared: dict[str, list] = {}  # the files of each same_worker name, together
    slow: list[list] = []
    rest: list = []
    for group in files.values():
        marks = [m for it in group for m in it.iter_markers("same_worker")]
        if marks:
            shared.setdefault(marks[0].args[0], []).extend(group)
        elif any(it.get_closest_marker("slow") is not None for it in group):
            slow.append(group)
        else:
            rest.extend(group)
    heavy = [*shared.values(), *slow]
    if workers < 2 or not heavy:
        return items
    chunk = len(items) // workers  # the scheduler's first split; the last takes the rest
    chunks: list[list] = [[] for _ in range(workers)]
    for i, group in enumerate(heavy):
        chunks[i % workers].extend(group)
    for c in chunks:
        while len(c) < chunk and rest:
            c.append(rest.pop(0))
    return [it for c in chunks for it in c] + rest


@pytest.hookimpl(trylast=True)  # after -m/-k have deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Under pytest-xdist, :func:`slow_first`."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    items[:] = slow_first(items, workers)
