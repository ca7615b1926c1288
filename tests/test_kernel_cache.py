"""numba's cache of our kernels is dropped when any source they depend on changes
(cassini.kernel_cache), not only the file that defines them."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from cassini import kernel_cache
from cassini.kernel_cache import (
    KERNEL_FILES,
    KERNEL_SOURCES,
    PACKAGE_ROOT,
    STAMP_NAME,
    refresh_cache_dirs,
    sources_digest,
)
from tests.conftest import require_module

PROJECT_PACKAGES = ("cassini", "mltcp")


def _module_file(module: str) -> str:
    path = Path(*module.split("."))
    return str(path.with_suffix(".py")) if (PACKAGE_ROOT / path.with_suffix(".py")).exists() \
        else str(path / "__init__.py")


def _project_imports(relative: str) -> set[str]:
    tree = ast.parse((PACKAGE_ROOT / relative).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in PROJECT_PACKAGES:
                for alias in node.names:  # a submodule by name, else the module itself
                    sub = f"{node.module}.{alias.name}"
                    is_module = (PACKAGE_ROOT / Path(*sub.split("."))).with_suffix(".py").exists()
                    found.add(_module_file(sub if is_module else node.module))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PROJECT_PACKAGES:
                    found.add(_module_file(alias.name))
    return found - {"cassini/kernel_cache.py"}


def test_every_kernel_file_and_its_project_imports_are_listed():
    defining = {
        str(p.relative_to(PACKAGE_ROOT))
        for package in PROJECT_PACKAGES
        for p in (PACKAGE_ROOT / package).rglob("*.py")
        if "@njit" in p.read_text() or "@_jit" in p.read_text()
    }
    assert defining == set(KERNEL_FILES)
    imported = set().union(*(_project_imports(f) for f in KERNEL_FILES))
    assert imported <= set(KERNEL_SOURCES), sorted(imported - set(KERNEL_SOURCES))
    assert len(set(KERNEL_SOURCES)) == len(KERNEL_SOURCES)


def test_a_changed_digest_deletes_only_the_cache_files_and_stamps(tmp_path):
    folder = tmp_path / "__pycache__"
    folder.mkdir()
    names = ("k.f-1.py311.nbi", "k.f-1.py311.1.nbc", "k.cpython-311.pyc", "notes.txt")
    for name in names:
        (folder / name).write_text("x")
    removed = refresh_cache_dirs([folder], "aaa")  # no stamp yet: stale
    assert sorted(p.name for p in removed) == sorted(names[:2])
    assert sorted(p.name for p in folder.iterdir()) == sorted([*names[2:], STAMP_NAME])
    assert (folder / STAMP_NAME).read_text().strip() == "aaa"
    (folder / names[0]).write_text("x")
    assert refresh_cache_dirs([folder], "aaa") == []  # same digest: kept
    assert (folder / names[0]).exists()
    assert [p.name for p in refresh_cache_dirs([folder], "bbb")] == [names[0]]
    missing = tmp_path / "new" / "__pycache__"
    missing.parent.mkdir()
    assert refresh_cache_dirs([missing], "ccc") == []  # made and stamped before numba caches
    assert (missing / STAMP_NAME).read_text().strip() == "ccc"


def test_the_digest_changes_with_any_listed_file(tmp_path):
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("X = 1\n")
    before = sources_digest(tmp_path, ("a.py", "b.py"))
    assert sources_digest(tmp_path, ("a.py", "b.py")) == before
    (tmp_path / "b.py").write_text("X = 2\n")
    assert sources_digest(tmp_path, ("a.py", "b.py")) != before


def test_ensure_fresh_runs_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(kernel_cache, "_checked", False)
    monkeypatch.setattr(kernel_cache, "refresh_cache_dirs", lambda d, g: calls.append(g) or [])
    kernel_cache.ensure_fresh()
    kernel_cache.ensure_fresh()
    assert calls == [sources_digest(PACKAGE_ROOT, KERNEL_SOURCES)]


KERNEL = """
from pathlib import Path
from numba import njit
from cassini.kernel_cache import refresh_cache_dirs, sources_digest
HERE = Path(__file__).parent
if {refresh}:
    refresh_cache_dirs([HERE / "__pycache__"], sources_digest(HERE, ("kern.py", "callee.py")))
from callee import value

@njit(cache=True)
def kernel():
    return value() * 10
"""


def _run_kernel(folder: Path) -> str:
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{PACKAGE_ROOT}"}
    done = subprocess.run(
        [sys.executable, "-c", "import kern; print(kern.kernel())"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _edit_callee(folder: Path, value: int) -> None:
    """Rewrite callee.py (the same size each time), its mtime at least 2 s past the last
    one's: Python's bytecode cache keys a module by its size and its mtime in whole
    seconds, so two edits within one second (a fast run) read the first's bytecode."""
    callee = folder / "callee.py"
    before = callee.stat().st_mtime_ns if callee.exists() else 0
    source = f"from numba import njit\n\n@njit(cache=True)\ndef value():\n    return {value}\n"
    callee.write_text(source)
    stamp = max(callee.stat().st_mtime_ns, before) + 2 * 10**9
    os.utime(callee, ns=(stamp, stamp))


def test_a_cached_kernel_sees_its_callee_change(tmp_path):
    """The hazard, end to end in numba: a kernel's cached code outlives an edit of the
    file its callee is in unless the stamp drops it."""
    require_module("numba", "the [sim] extra")
    for refresh, expected_after in ((False, "10"), (True, "20")):
        folder = tmp_path / f"refresh_{refresh}"
        folder.mkdir()
        (folder / "kern.py").write_text(textwrap.dedent(KERNEL.format(refresh=refresh)))
        _edit_callee(folder, 1)
        assert _run_kernel(folder) == "10"
        _edit_callee(folder, 2)
        # without the stamp numba runs the stale code (what this module exists for)
        assert _run_kernel(folder) == expected_after
