"""A newcomer at a shell: a host table with any name, the defaults ``--help`` promises,
``cassini cluster show -`` from a pipe, and errors that do not repeat a huge value."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from test_cli_bounds import cassini  # ``cassini ARGV`` in this process

from cassini import cli, schema
from cassini.errors import InputError
from cassini.sim.topologies.hosts import DEFAULTS
from cassini.sim.topologies.show import ASSUMED_GPUS_PER_SERVER

ROOT = Path(__file__).resolve().parent.parent
LINGJUN = ROOT / "tests" / "data" / "topologies" / "lingjun_irregular.csv"
CLUSTER_EXAMPLE = ROOT / "deploy" / "cluster-example.yaml"
CONFIG = "cluster: {generate: two-tier, racks: 2, servers_per_rack: 2, gpus_per_server: 8}\n"


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def without_source(summary: str) -> dict:
    return {k: v for k, v in json.loads(summary).items() if k != "source"}


def option_help(capsys, argv: list[str], flag: str) -> str:
    """The help text of ``flag`` in ``cassini ARGV --help``, on one line."""
    code, out, _ = cassini(capsys, *argv, "--help")
    assert code == 0
    text = " ".join(out.split())
    start = text.index(f"{flag} ", text.index("options:"))
    end = text.find(" --", start + len(flag))
    return text[start : end if end > 0 else None]


# -- 1. a host table is one whatever its name, decided as for stdin ------------------------
@pytest.mark.parametrize("name", ["topo.txt", "hosts", "topo.CSV", "table.yaml"])
def test_topo_show_reads_a_host_table_whatever_its_name(capsys, tmp_path, name):
    code, want, err = cassini(capsys, "sim", "topo", "show", str(LINGJUN), "--json")
    assert code == 0, err
    f = tmp_path / name
    shutil.copy(LINGJUN, f)
    code, got, err = cassini(capsys, "sim", "topo", "show", str(f), "--json")
    assert code == 0, err  # was: exit 2, "cluster: must be a JSON object, got the string ..."
    assert without_source(got) == without_source(want)
    code, got, err = cassini(capsys, "sim", "topo", "show", str(f), "--json",
                             "--server-link-bps", "1e11")  # fmt: skip
    assert code == 0, err  # host-table options apply to it too
    assert json.loads(got)["links"]["host-tor"]["bps"] == {"1e+11": 16}


@pytest.mark.parametrize(
    "text",
    [LINGJUN.read_text(), CONFIG, "# a, b\n" + CONFIG],
    ids=["host-table", "config", "config-commented"],
)
@pytest.mark.parametrize("name", ["t.txt", "t.yaml", "t"])
def test_topo_show_decides_for_a_file_as_for_stdin(capsys, tmp_path, text, name):
    """Named anything but ``.csv`` (always a host table, so that a bad header is named
    as a host table's), a file is read as stdin would be."""
    f = tmp_path / name
    f.write_text(text)
    code, from_stdin, err = cassini(capsys, "sim", "topo", "show", "-", "--json", stdin=text)
    assert code == 0, err
    code, from_file, err = cassini(capsys, "sim", "topo", "show", str(f), "--json")
    assert code == 0, err
    assert without_source(from_file) == without_source(from_stdin)


def test_a_csv_with_a_bad_header_is_named_as_a_host_table(capsys, tmp_path):
    f = tmp_path / "semi.csv"
    f.write_text("host;tor\nh1;t1\n")
    code, _, err = cassini(capsys, "sim", "topo", "show", str(f))
    assert code == 2 and "unknown column 'host;tor'" in one_line(err), err


def test_a_bad_host_table_with_another_name_is_named_by_line(capsys, tmp_path):
    f = tmp_path / "topo.txt"
    f.write_text("ip,DSW,PSW,ASW\nh1,G1,P1,S1\nh2,G1,P1\n")
    code, _, err = cassini(capsys, "sim", "topo", "show", str(f))
    assert code == 2 and f"{f}:3:4: ASW: missing" in one_line(err)


# -- 2. --help gives the defaults the code uses --------------------------------------------
def test_topo_show_help_gives_the_host_table_defaults(capsys):
    argv = ["sim", "topo", "show"]
    expected = {
        "--gpus-per-server": ASSUMED_GPUS_PER_SERVER,
        "--server-link-bps": DEFAULTS["server_link_bps"],
        "--oversubscription": DEFAULTS["oversubscription"],
        "--pod-oversubscription": DEFAULTS["pod_oversubscription"],
    }
    for flag, value in expected.items():
        assert f"(default {value:g}" in option_help(capsys, argv, flag), flag
    assert "bits/s" in option_help(capsys, argv, "--server-link-bps")


def test_the_docs_give_the_same_host_table_defaults():
    text = (ROOT / "docs" / "topologies.md").read_text()
    table = text[text.index("### Parameters and defaults") :]
    for name, value in DEFAULTS.items():
        row = re.search(rf"^\| `{name}` \| ([^|]+) \|", table, re.M)
        assert row and float(row.group(1)) == value, name
    assert f"shows the table with {ASSUMED_GPUS_PER_SERVER} per host" in table


def test_advise_help_says_mean_is_the_default_aggregate(capsys):
    help_text = option_help(capsys, ["advise"], "--aggregate")
    assert re.search(r"mean [^()]*\(default", help_text), help_text


# -- 3. cassini cluster show - ---------------------------------------------------------------
def test_cluster_show_reads_stdin(capsys):
    code, want, err = cassini(capsys, "cluster", "show", str(CLUSTER_EXAMPLE))
    assert code == 0, err
    code, got, err = cassini(capsys, "cluster", "show", "-", stdin=CLUSTER_EXAMPLE.read_text())
    assert code == 0, err  # was: "-: cannot read: no such file"
    assert got == want


def test_cluster_show_reads_json_from_stdin_and_names_stdin_in_errors(capsys):
    body = {"links": [{"id": "l1", "capacity_bps": 1e9}], "nodes": {"n1": ["l1"]}}
    code, out, err = cassini(capsys, "cluster", "show", "-", stdin=json.dumps(body))
    assert code == 0 and "1 node" in out, err
    code, _, err = cassini(capsys, "cluster", "show", "-", stdin='{"links": 5, "nodes": {}}')
    line = one_line(err)
    assert code == 2 and line.startswith("cassini: error: <stdin>: links:"), line
    assert "cassini-stdin" not in line
    code, _, err = cassini(capsys, "cluster", "show", "-", stdin="")
    assert code == 2 and one_line(err) == "cassini: error: <stdin>: empty file"


def test_top_level_help_lists_cluster_show_among_the_stdin_commands():
    sentence = cli.EPILOG[cli.EPILOG.index("'-' for the input file") :]
    sentence = " ".join(sentence[: sentence.index(".")].split())
    assert "cluster show" in sentence


# -- 4. a long value in an error is cut ---------------------------------------------------
def test_score_error_does_not_repeat_a_3000_digit_number(capsys, tmp_path):
    f = tmp_path / "t.json"
    f.write_text("1234567890" * 300)
    code, _, err = cassini(capsys, "score", str(f))
    line = one_line(err)
    assert code == 2 and len(line) < 200, line
    assert "got the number 1234567890123456789" in line and "... (3000 characters)" in line


def test_topo_show_error_does_not_repeat_a_whole_string(capsys, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("cluster: " + "x" * 5000 + "\n")
    code, _, err = cassini(capsys, "sim", "topo", "show", str(f))
    line = one_line(err)
    assert code == 2 and len(line) < 250 and "... (5000 characters)" in line, line


def test_kind_of_keeps_short_values_and_cuts_long_ones():
    assert schema.kind_of("abc") == "the string 'abc'"
    assert schema.kind_of(1.5) == "the number 1.5"
    assert schema.kind_of(-3) == "the number -3"
    assert schema.kind_of("a" * 60) == f"the string {'a' * 60!r}"
    assert schema.kind_of(10**59) == f"the number {10**59}"
    assert schema.kind_of("é" * 61) == f"the string {'é' * 60!r}... (61 characters)"
    assert schema.kind_of(10**60) == f"the number {'1' + '0' * 59}... (61 characters)"
    huge = schema.kind_of(10**5000)  # past what repr writes: named by its size, no ValueError
    assert huge.startswith("the number (about 5001 digits") and len(huge) < 80


def test_every_message_built_with_kind_of_is_cut():
    with pytest.raises(InputError) as e:
        schema.require_object("y" * 1000, "cluster")
    assert str(e.value) == (
        f"cluster: must be a JSON object, got the string {'y' * 60!r}... (1000 characters)"
    )
    with pytest.raises(InputError) as e:
        schema.choice("z" * 500, "mode", ("a", "b"))
    assert str(e.value).endswith("... (500 characters)")


def test_reader_messages_cut_a_long_value():
    reader = schema.Reader({"name": 7 * 10**100, "n": -(10**100), "k": "k" * 100})
    for call in (lambda: reader.string("name"), lambda: reader.integer("n"),
                 lambda: reader.number("n"), lambda: reader.choice("k", ("a",))):  # fmt: skip
        with pytest.raises(InputError) as e:
            call()
        assert len(str(e.value)) < 120 and "characters)" in str(e.value), str(e.value)
