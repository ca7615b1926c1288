"""The light install: ``import cassini`` and the CLI pull in no torch, matplotlib or testbed
dependency, and a fresh virtual environment with only the core dependencies
(``pip install .``) runs ``cassini advise --example`` and ``cassini serve``."""

from __future__ import annotations

import ast
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Not core dependencies: only the extras ([testbed], [sim], [ray], [kube]) install them.
HEAVY = (
    "torch", "torchvision", "matplotlib", "scapy", "pyroute2", "transformers", "ray", "kubernetes"
)
CORE = {
    "numpy",
    "networkx",
    "yaml",
    "starlette",
    "uvicorn",
    "httptools",
    "uvloop",
    "prometheus_client",
    "pydantic",
}


def _top_level_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """Modules imported by statements that run at import time (not inside functions)."""
    out = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.Import):
                out.extend((node.lineno, a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.append((node.lineno, node.module))
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, field, []):
                        visit(child.body if isinstance(child, ast.ExceptHandler) else [child])
            elif isinstance(node, ast.ClassDef):
                visit(node.body)

    visit(tree.body)
    return out


def test_the_import_scan_sees_import_time_imports_only():
    code = (
        "import torch\ndef f():\n    import matplotlib\n"
        "try:\n    import scapy.all\nexcept E:\n    import ray\n"
    )
    assert _top_level_imports(ast.parse(code)) == [(1, "torch"), (5, "scapy.all"), (7, "ray")]


def test_no_cassini_module_imports_a_heavy_dependency_at_import_time():
    offenders = []
    for path in sorted((ROOT / "cassini").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for line, module in _top_level_imports(tree):
            if module.split(".")[0] in HEAVY:
                offenders.append(f"{path.relative_to(ROOT)}:{line}: import {module}")
    assert not offenders, "import these inside the functions that need them:\n" + "\n".join(
        offenders
    )


def test_importing_cassini_and_running_the_cli_loads_no_heavy_module():
    code = (
        "import sys, io, contextlib\n"
        "import cassini, cassini.api, cassini.advisor, cassini.plugin, cassini.agent\n"
        "import cassini.torch, cassini.cli, cassini.service.app, cassini.service.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert cassini.cli.main(['advise', '--example']) == 0\n"
        "    try:\n"
        "        cassini.cli.main(['sim', '--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_core_dependencies_are_what_the_package_declares():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {
        d.split(">")[0].split("=")[0].split("[")[0].strip().lower().replace("-", "_")
        for d in meta["dependencies"]
    }
    assert names == {
        "numpy",
        "networkx",
        "pyyaml",
        "starlette",
        "uvicorn",
        "httptools",
        "uvloop",
        "prometheus_client",
        "pydantic",
    }
    extras = meta["optional-dependencies"]
    assert "torch==2.13.0" in extras["testbed"]
    assert any(d.startswith("matplotlib") for d in extras["sim"])
    assert set(extras) >= {"testbed", "sim", "ray", "dev"}


@pytest.mark.slow
def test_fresh_core_only_venv_runs_advise_and_serve(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.o", "vmlinux.h")
    for name in ("cassini", "mltcp", "testbed"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    env_dir = tmp_path / "venv"
    # no pip of its own: this environment's pip installs into it (--python), which spares
    # ensurepip's ~5 s and the bundled pip's slower install
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
         "--disable-pip-version-check", "--no-compile", str(src)],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    check = (
        "import importlib.util, sys, cassini, cassini.cli, cassini.service.app\n"
        f"print(sorted(m for m in {HEAVY!r} if importlib.util.find_spec(m)))\n"
        f"print(sorted(m for m in {sorted(CORE)!r} if importlib.util.find_spec(m) is None))\n"
    )
    r = subprocess.run([str(py), "-c", check], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    installed_heavy, missing_core = r.stdout.strip().splitlines()
    assert installed_heavy == "[]", f"the core install pulled in {installed_heavy}"
    assert missing_core == "[]"

    cassini_bin = env_dir / "bin" / "cassini"
    r = subprocess.run(
        [str(cassini_bin), "advise", "--example"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["best"]

    proc = subprocess.Popen(
        [str(cassini_bin), "serve", "--port", "0", "--workers", "1"],
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stderr.readline()
        assert "listening on http://127.0.0.1:" in line, line + proc.stderr.read()
        port = int(line.split("127.0.0.1:")[1].split()[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = (ROOT / "cassini" / "data" / "example_advise.json").read_bytes()
        conn.request("POST", "/v1/advise", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["best"]
        conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
