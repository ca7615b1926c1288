"""The README and docs a newcomer reads: the README stays short (≤ 500 lines), every
repository path and link it names exists, the example files it uses are the shipped
examples, docs/README.md maps every document, and help texts say what the code does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TOP = "cassini|mltcp|ebpf|testbed|experiments|benchmarks|deploy|docs|examples|scripts|tests"
PATH = re.compile(rf"(?<![\w/.<-])(?:{TOP})/[\w./-]*")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def named_paths(text: str) -> set[str]:
    """Repository paths named in ``text``: words under a top-level folder of the project."""
    return {p.rstrip(".,;:") for p in PATH.findall(text)}


def test_readme_is_at_most_500_lines():
    n = len(README.read_text().splitlines())
    assert n <= 500, f"README.md has {n} lines; move detail into docs/ (docs/README.md maps it)"


def test_every_repository_path_the_readme_names_exists():
    missing = sorted(p for p in named_paths(README.read_text()) if not (ROOT / p).exists())
    assert not missing, f"README.md names paths that do not exist: {missing}"


def test_path_finder_sees_paths_and_skips_absolute_and_placeholder_ones():
    text = "see `docs/a.md`, /sys/fs/cgroup/tests/x and <run>/tests/y; examples/request.json."
    assert named_paths(text) == {"docs/a.md", "examples/request.json"}


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    ids = set(re.findall(r'<a id="([\w-]+)"></a>', text))
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        ids.add(slug)
    return ids


@pytest.mark.parametrize("doc", ["README.md", "docs/README.md", "docs/known_problems.md"])
def test_every_relative_link_resolves(doc):
    path = ROOT / doc
    for target in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        assert where.exists(), f"{doc}: link to {target}: no such file"
        if anchor:
            assert anchor in anchors(where), f"{doc}: link to {target}: no such anchor"


def test_the_example_files_the_readme_uses_are_the_shipped_examples():
    text = README.read_text()
    for name, shipped in (
        ("request.json", "example_advise.json"),
        ("link.json", "example_score.json"),
    ):
        assert f"examples/{name}" in text
        mine = json.loads((ROOT / "examples" / name).read_text())
        assert mine == json.loads((ROOT / "cassini" / "data" / shipped).read_text()), name


def test_docs_index_maps_every_document():
    index = (ROOT / "docs" / "README.md").read_text()
    linked = set(LINK.findall(index))
    for doc in sorted((ROOT / "docs").glob("*.md")):
        if doc.name != "README.md":
            assert doc.name in linked, f"docs/README.md does not list {doc.name}"
    assert "openapi.json" in linked and "figures/" in linked


def test_readme_points_at_the_venv_and_uses_no_bare_python():
    text = README.read_text()
    assert 'export PATH="$PWD/.venv/bin:$PATH"' in text
    bare = re.findall(r"(?<![\w/.-])python (?:-m |benchmarks/|tests/)", text)
    assert not bare, "commands in the README run .venv/bin/python, not a bare python"


def test_mltcp_set_help_says_unset_parameters_keep_their_loaded_values(capsys):
    from mltcp.cli import main

    with pytest.raises(SystemExit):
        main(["set", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("unset: keeps the loaded value") == 5
    with pytest.raises(SystemExit):
        main(["load", "--help"])
    assert "keeps the loaded value" not in capsys.readouterr().out


def test_token_review_is_documented_with_its_companion_flag():
    for doc in (README, ROOT / "docs" / "service.md"):
        for line in doc.read_text().splitlines():
            if "--token-review URL" in line:
                assert "--token-review-user" in line, f"{doc.name}: {line.strip()}"


def test_service_from_python_snippet_runs_as_a_script(tmp_path):
    """docs/service.md's "From Python" snippet, pasted into a script file, serves: the
    worker processes (forkserver) import the script's __main__ again, so it needs the
    ``if __name__ == "__main__":`` guard (without it every request got 500)."""
    import subprocess
    import sys

    text = (ROOT / "docs" / "service.md").read_text()
    section = text[text.index("### From Python"):]
    snippet = section[section.index("```python\n") + len("```python\n"):]
    snippet = snippet[: snippet.index("```")]
    assert 'if __name__ == "__main__":' in snippet
    placeholder = re.search(r"^( +)\.\.\. .*$", snippet, re.M)
    assert placeholder, snippet
    indent = placeholder.group(1)
    example = json.dumps(str(ROOT / "cassini" / "data" / "example_score.json"))
    request = (
        f"{indent}import urllib.request\n"
        f"{indent}data = open({example}, 'rb').read()\n"
        f"{indent}req = urllib.request.Request(srv.url + '/v1/score', data=data, "
        "headers={'Content-Type': 'application/json'})\n"
        f"{indent}print('STATUS', urllib.request.urlopen(req, timeout=60).status)"
    )
    script = tmp_path / "embed.py"
    script.write_text(snippet[: placeholder.start()] + request + snippet[placeholder.end():])
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0 and "STATUS 200" in run.stdout, run.stdout + run.stderr[-2000:]
