"""The suite's own rules: every skip goes through ``conftest.require`` (so ``CI=true`` turns a
missing prerequisite into a failure), and the helpers behave as conftest documents."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from _pytest.outcomes import Failed, Skipped
from conftest import in_ci, require, require_module, require_tool

TESTS = Path(__file__).resolve().parent
# pytest / unittest spellings that skip or expect-fail without asking conftest.require
BYPASSES = {"skip", "skipif", "importorskip", "xfail", "SkipTest", "skipTest", "skipUnless"}


def bypasses(source: str) -> list[tuple[int, str]]:
    """(line, name) of every skip/importorskip/xfail spelling in ``source`` (Python code)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in BYPASSES:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Name) and node.id in BYPASSES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.ImportFrom):
            found += [(node.lineno, a.name) for a in node.names if a.name in BYPASSES]
    return sorted(found)


def test_the_scanner_finds_every_spelling():
    source = (
        "import pytest\nfrom pytest import importorskip\n"
        "pytest.skip('x')\n@pytest.mark.skipif(True, reason='r')\ndef f(): pass\n"
        "torch = pytest.importorskip('torch')\npytest.xfail('y')\nraise unittest.SkipTest('z')\n"
    )
    assert bypasses(source) == [
        (2, "importorskip"), (3, "skip"), (4, "skipif"), (6, "importorskip"), (7, "xfail"),
        (8, "SkipTest"),
    ]  # fmt: skip
    assert bypasses("require(shutil.which('gcc') is not None, 'gcc')\nx.skipped = 1\n") == []


def test_no_test_skips_around_require():
    offenders = [
        f"{path.relative_to(TESTS)}:{line}: {name}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "conftest.py"
        and path != Path(__file__).resolve()
        for line, name in bypasses(path.read_text())
    ]
    assert offenders == [], "skip through conftest.require/require_module instead:\n" + "\n".join(
        offenders
    )


@pytest.mark.parametrize("value", ["true", "TRUE", "True", " true "])
def test_ci_true_in_any_case_turns_a_miss_into_a_failure(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    assert in_ci()
    with pytest.raises(Failed, match="CI=true and a prerequisite is missing: gcc"):
        require(False, "gcc")
    with pytest.raises(Failed, match="no_such_module_xyz"):
        require_module("no_such_module_xyz")
    with pytest.raises(Failed, match="no-such-tool-xyz"):
        require_tool("no-such-tool-xyz")


@pytest.mark.parametrize("value", [None, "", "false", "1"])
def test_outside_ci_a_miss_skips_loudly(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not in_ci()
    with pytest.raises(Skipped, match=r"SKIPPED \(prerequisite missing\): gcc"):
        require(False, "gcc")
    with pytest.raises(Skipped, match="no_such_module_xyz"):
        require_module("no_such_module_xyz")


def test_present_prerequisites_pass_through(monkeypatch):
    monkeypatch.setenv("CI", "true")
    require(True, "anything")
    assert require_module("json").dumps([1]) == "[1]"
    assert require_tool("sh").endswith("/sh")


@pytest.mark.parametrize(("ci", "derandomized"), [("true", True), ("1", True), (None, False)])
def test_hypothesis_runs_its_ci_profile_when_ci_is_set(ci, derandomized):
    import subprocess
    import sys

    code = "import conftest; from hypothesis import settings as s; "
    code += "print(s.default.derandomize, s.default.deadline)"
    env = {"PATH": "/usr/bin:/bin"} | ({} if ci is None else {"CI": ci})
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=TESTS, env=env, capture_output=True, text=True,
        check=True,
    ).stdout.split()  # fmt: skip
    assert out[0] == str(derandomized)
    if derandomized:
        assert out[1] == "None"  # no per-example deadline under CI


def module_marks(source: str) -> list[str]:
    """The marker names of a module's ``pytestmark`` (``pytest.mark.x`` or a list of
    them, ``pytest.mark.usefixtures(...)`` included)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return sorted(
                n.attr for n in ast.walk(node.value)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
                and n.value.attr == "mark"
            )  # fmt: skip
    return []


def test_module_marks_reads_both_spellings():
    assert module_marks("import pytest\npytestmark = pytest.mark.root\n") == ["root"]
    two = "pytestmark = [pytest.mark.root, pytest.mark.usefixtures('x')]\n"
    assert module_marks(two) == ["root", "usefixtures"]
    assert module_marks("@pytest.mark.root\ndef test_x(): pass\n") == []


def test_root_only_files_and_only_they_are_named_root():
    """One naming rule: a test file whose every test needs root (module-level ``root``
    mark) is ``test_*_root.py``, and a ``*_root.py`` file is root-only.  Files with a few
    root tests among others mark those tests one by one."""
    wrong = []
    for path in sorted(TESTS.glob("test_*.py")):
        root_only = "root" in module_marks(path.read_text())
        if root_only != path.stem.endswith("_root"):
            wrong.append(path.name)
    assert wrong == [], "root-only test files are named test_*_root.py, and only they"
    assert (TESTS / "test_mltcp_kernel_root.py").exists()  # the rule has files to hold


@pytest.mark.root
def test_the_after_test_check_sees_our_namespaces_and_processes_in_them():
    import subprocess
    import time

    from conftest import our_netns, require_root, run_name, stray_processes

    require_root()
    require_tool("unshare")
    name = run_name("meta")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert name in our_netns()
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)
    assert name not in our_netns()
    p = subprocess.Popen(["unshare", "--net", "sleep", "30"])  # ours: it inherits the tag
    try:
        deadline = time.monotonic() + 5
        while not any(s.split()[0] == str(p.pid) for s in stray_processes()):
            assert time.monotonic() < deadline, stray_processes()
            time.sleep(0.05)
    finally:
        p.kill()
        p.wait()
    assert not any(s.split()[0] == str(p.pid) for s in stray_processes())


class _Item:
    def __init__(self, nodeid: str, slow: bool = False, same_worker: str = "") -> None:
        self.nodeid, self.slow, self.same_worker = nodeid, slow, same_worker

    def get_closest_marker(self, name: str):
        return object() if name == "slow" and self.slow else None

    def iter_markers(self, name: str):
        if name == "same_worker" and self.same_worker:
            yield pytest.mark.same_worker(self.same_worker).mark


def test_slow_files_start_the_workers_chunks_whole_and_the_rest_keep_their_order() -> None:
    from conftest import slow_first

    items = [_Item(f"tests/a.py::t{i}") for i in range(4)]
    items += [_Item("tests/b.py::s", slow=True), _Item("tests/b.py::t")]
    items += [_Item(f"tests/c.py::t{i}") for i in range(3)]
    items += [_Item("tests/d.py::s", slow=True)]
    ordered = slow_first(items, 2)
    assert sorted(map(id, ordered)) == sorted(map(id, items))  # nothing lost or doubled
    ids = [it.nodeid for it in ordered]
    half = len(items) // 2  # what work stealing hands the first worker
    assert ids[:2] == ["tests/b.py::s", "tests/b.py::t"]  # b.py whole, first chunk
    assert ids[half] == "tests/d.py::s"  # the second chunk starts with d.py
    rest = [i for i in ids if i.split("::")[0] not in ("tests/b.py", "tests/d.py")]
    assert rest == [it.nodeid for it in items if it.nodeid.split("::")[0] in
                    ("tests/a.py", "tests/c.py")]  # fmt: skip
    assert slow_first(items, 1) == items and slow_first(items, 0) == items


def test_files_marked_same_worker_start_one_chunk_together() -> None:
    """Two files loading ns-3 (one marks only one of its tests) go whole, one after the
    other, to the start of the first chunk, before any slow file; the rest keep their
    order."""
    from conftest import slow_first

    items = [_Item("tests/s.py::s", slow=True)]
    items += [_Item(f"tests/a.py::t{i}") for i in range(4)]
    items += [_Item("tests/p.py::t", same_worker="ns-3"), _Item("tests/p.py::u")]
    items += [_Item(f"tests/c.py::t{i}") for i in range(3)]
    items += [_Item("tests/q.py::t"), _Item("tests/q.py::u", same_worker="ns-3")]
    ordered = slow_first(items, 2)
    assert sorted(map(id, ordered)) == sorted(map(id, items))
    ids = [it.nodeid for it in ordered]
    assert ids[:4] == ["tests/p.py::t", "tests/p.py::u", "tests/q.py::t", "tests/q.py::u"]
    assert ids[len(items) // 2] == "tests/s.py::s"
    assert [i for i in ids if i[6] in "ac"] == [it.nodeid for it in items if it.nodeid[6] in "ac"]
