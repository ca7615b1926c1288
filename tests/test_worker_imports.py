"""Training workers import MLTCP's training side (:mod:`mltcp.marks`) only, never its
privileged side (:mod:`mltcp.admin`): each worker module, with every import it makes of
our packages (at the top or inside a function), runs in a fresh interpreter that must end
without ``mltcp.admin`` loaded."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.run.config import WORKER_MODULES

ROOT = Path(__file__).resolve().parent.parent
OURS = ("mltcp", "testbed", "cassini")

#: run in the child: every import statement of ours in the worker's source, then the modules
#: loaded, as JSON
CHILD = """
import ast, importlib, json, sys
mod = importlib.import_module(sys.argv[1])
tree = ast.parse(open(mod.__file__).read())
for node in ast.walk(tree):
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
        names = [node.module]
    else:
        continue
    if any(n.split(".")[0] in {ours} for n in names):
        exec(ast.unparse(node), {{}})
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by(module: str) -> set[str]:
    """The modules a fresh interpreter holds after importing ``module`` and running each of
    its own imports of our packages."""
    code = CHILD.format(ours=set(OURS))
    r = subprocess.run(
        [sys.executable, "-c", code, module], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout.splitlines()[-1]))


def mltcp_imports(module: str) -> set[str]:
    """The ``mltcp`` modules ``module``'s source names in its import statements."""
    path = ROOT / (module.replace(".", "/") + ".py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mltcp"):
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mltcp")}
    return found


@pytest.mark.parametrize("module", sorted(set(WORKER_MODULES.values())))
def test_a_training_worker_never_loads_mltcps_privileged_side(module):
    assert "mltcp.marks" in mltcp_imports(module)  # the worker does mark iterations
    loaded = loaded_by(module)
    assert "mltcp.marks" in loaded  # the check below saw the marking code's imports
    assert not {m for m in loaded if m == "mltcp.admin" or m.startswith("mltcp.admin.")}
