"""``python -m cassini.sim.jit_warmup`` (run by ``make setup``) reaches every numba kernel
of the project, so a fresh checkout compiles each once, at setup, not in every process."""

import importlib
import importlib.util
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

from conftest import require_module

numba = require_module("numba", "the [sim] extra")

import cassini  # noqa: E402


def compiled_kernels() -> dict[str, object]:
    """Every numba dispatcher defined in a module of ``cassini`` that compiles with
    numba (by qualified name)."""
    dispatcher = numba.core.dispatcher.Dispatcher
    found = {}
    for info in pkgutil.walk_packages(cassini.__path__, "cassini."):
        spec = importlib.util.find_spec(info.name)
        if info.ispkg or spec is None or spec.origin is None:
            continue
        if not re.search(r"numba|_jit\b", Path(spec.origin).read_text()):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, dispatcher) and value.__module__ == info.name:
                found[f"{info.name}.{name}"] = value
    return found


def entry_points(kernels: dict[str, object]) -> dict[str, object]:
    """The kernels no other kernel calls (by name in its source): Python calls these, and
    the others compile inside them (a kernel loaded from numba's cache compiles nothing
    else, so a callee's own dispatcher may stay empty)."""
    sources = {name: inspect.getsource(k.py_func) for name, k in kernels.items()}
    called = {
        name
        for name in kernels
        for other, text in sources.items()
        if other != name and re.search(rf"\b{re.escape(name.rsplit('.', 1)[1])}\(", text)
    }
    return {name: k for name, k in kernels.items() if name not in called}


COLD_AFTER_WARM_UP = """
import sys
sys.path.insert(0, sys.argv[1])
from test_jit_warmup import compiled_kernels, entry_points
from cassini.sim import jit_warmup
entries = entry_points(compiled_kernels())
assert jit_warmup.warm() > 0
print(sorted(name for name, k in entries.items() if not k.signatures))
"""


def test_the_warm_up_compiles_every_kernel() -> None:
    """In a fresh interpreter (no other test has called a kernel), every entry point has
    a compiled signature after the warm-up."""
    kernels = compiled_kernels()
    assert len(kernels) >= 20, sorted(kernels)  # the network models' and Crux's kernels
    entries = entry_points(kernels)
    for name in ("priority._cut_programme_compiled", "sim.network.flowstep._advance",
                 "sim.network.jitloop._loop", "circle_compiled.descend"):  # fmt: skip
        assert f"cassini.{name}" in entries, sorted(entries)
    here = str(Path(__file__).parent)
    r = subprocess.run([sys.executable, "-c", COLD_AFTER_WARM_UP, here], capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", f"not reached by cassini.sim.jit_warmup: {r.stdout}"


def test_the_parallel_warm_up_runs_every_part() -> None:
    """``make setup`` runs the parts in parallel processes: each one runs and is timed."""
    from cassini.sim import jit_warmup

    parts = jit_warmup.warm_parallel(2)
    assert list(parts) == list(jit_warmup.PARTS)
    assert all(seconds > 0 for seconds in parts.values()), parts
