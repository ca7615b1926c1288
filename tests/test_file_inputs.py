"""File-input fuzzer: every console command that reads a file, handed a bad one.

The commands are found, not listed: each console script of pyproject.toml
``[project.scripts]`` lives in a module with ``build_parser()`` and ``main(argv)``; the
test walks those argparse trees (subcommands included).

Convention (what a new command does to be covered without editing this test): an
argument naming a file the command *reads* has ``type=cassini.files.input_file`` (a folder
it reads: ``type=cassini.files.input_dir``); one naming a file or folder it only *writes*
has ``type=cassini.files.output_path`` and is listed in :data:`OUTPUTS` with the reason.
The command reads its files through :mod:`cassini.files` (``read_text`` / ``read_data`` /
``check_file`` / ``check_dir``) before anything privileged or slow.
:func:`test_every_path_argument_is_marked` fails on an argument that looks like a path
(dest, metavar or help says file, path, config, log, ...) and is neither marked nor in
:data:`NOT_FILES`.  A new ``input_file`` argument is fuzzed at once with the plain call
(its required options filled in); its truncated case fails until :data:`USES` gives it a
valid example.

Every ``input_file`` argument, in each of its :data:`USES` (how the command is called so
the file is read; a new argument gets the plain call), is given:

- ``empty``: a file of 0 bytes;
- ``truncated``: the first half of a valid example (:data:`EXAMPLES`);
- ``random``: 4 KiB of seeded random bytes without NUL; ``nul``: 4 KiB of NUL bytes;
- ``directory``: an empty folder; ``missing``: a name that is not there;
- ``unreadable``: a valid example with mode 000.  As root (which reads it anyway) the
  command runs without ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` in its thread's
  effective set (``capset``, restored after): still uid 0, so it reads the checkout and
  its shipped data whatever their folders' modes, but the open of a mode-000 file really
  fails with EACCES; as another user mode 000 is enough.

A folder argument (``input_dir``) gets ``file`` (a regular file), ``missing``,
``unreadable`` (a folder with mode 000, as above) and ``empty-dir``.  A case that is not
an error for one argument is listed in its :class:`Use` with the reason, and the test then
asserts that the command goes on (``--state``: a missing or empty file is a new database).

Each must exit 2 with one line on standard error that names the file and says what is
wrong (per case: ``empty file``, ``binary file`` or ``not a <format>``, ``directory``,
``no such file``, ``permission denied``; a truncated file: the parser's complaint), no
traceback, and leave the file as it was (bytes and mtime; a missing file stays missing).
Commands run in this process (``main(argv)``); the steps a command takes once its files
are read (listening, simulating, running Mininet) are replaced by a stub that fails the
test, so a file that is not checked cannot start them.  A few real console-script runs
show the same at the process level.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import importlib
import io
import os
import random
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import require_module

from cassini import files

ROOT = Path(__file__).resolve().parents[1]
CASES = ("empty", "truncated", "random", "nul", "directory", "missing", "unreadable")
#: The cases of an argument naming a folder (``type=files.input_dir``).
DIR_CASES = ("file", "missing", "unreadable", "empty-dir")
#: What the one line must say, per case.
SAYS = {
    "empty": r"empty file",
    "truncated": r"\S",
    "random": r"binary file|not a (usable )?(pcap|SQLite|PEM)",
    "nul": r"binary file|not a (usable )?(pcap|SQLite|PEM)",
    "directory": r"directory",
    "missing": r"no such (file|directory)",
    "unreadable": r"permission denied",
    "file": r"not a directory",
    "empty-dir": r"\S",
}
MARKS = (files.input_file, files.input_dir, files.output_path)
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2  # linux/capability.h


# -- the commands -------------------------------------------------------------------------
@functools.cache
def console_scripts() -> dict[str, str]:
    """Program name -> module of each console script in pyproject.toml (read once)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return {name: target.split(":")[0] for name, target in scripts.items()}


@dataclass(frozen=True)
class Arg:
    """One argument of one command: ``command`` is the program and its subcommands."""

    command: tuple[str, ...]
    action: argparse.Action

    @property
    def name(self) -> str:
        return self.action.option_strings[-1] if self.action.option_strings else self.action.dest

    @property
    def key(self) -> str:
        return " ".join((*self.command, self.name))


def walk(parser: argparse.ArgumentParser, command: tuple[str, ...]) -> Iterator[Arg]:
    """Every argument of ``parser`` and of its subcommands, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*command, name))
        elif not isinstance(action, argparse._HelpAction):
            yield Arg(command, action)


def all_args() -> list[Arg]:
    out = []
    for program, module in console_scripts().items():
        out += walk(importlib.import_module(module).build_parser(), (program,))
    return out


PATHLIKE_NAME = re.compile(
    r"(?i)(^|[-_ ])(file|files|path|paths|config|log|pem|csv|yaml|json|dir|directory|folder|"
    r"trace|cluster|state|cgroup|out|in)([-_ .]|$)"
)
PATHLIKE_HELP = re.compile(r"(?i)\b(file|files|path|directory|folder|\.csv|\.json|\.yaml)\b")


def looks_like_a_path(arg: Arg) -> bool:
    """Takes a value, is not a choice or a number, and its name or help speaks of files."""
    a = arg.action
    if a.nargs == 0 or a.choices is not None or a.type in (int, float):
        return False
    metavar = a.metavar if isinstance(a.metavar, str) else " ".join(a.metavar or ())
    names = [a.dest, metavar, *a.option_strings]
    return any(PATHLIKE_NAME.search(n.strip("-")) for n in names if n) or bool(
        PATHLIKE_HELP.search(a.help or "")
    )


#: Arguments written, never read (``type=files.output_path``), and why they are not fuzzed.
OUTPUTS = {
    "cassini profile --plot": "the picture is written (matplotlib), not read",
    "cassini profile --out": "the profile JSON is written, not read",
    "cassini serve --audit-log": "JSON lines are appended, never read",
    "cassini sim run --out": "output folder, created",
    "cassini sim sweep --out": "output folder, created",
    "cassini sim trace --out": "the trace is written, not read",
    "testbed run --out": "output folder, created",
    "testbed launch --out": "a path on the remote nodes, written by the workers there",
    "testbed calibrate --out": "the calibration JSON is written, not read",
    "cassini cluster from-kube --out": "the cluster file is written, not read",
}
#: Arguments that look like paths and name no file, and why.
NOT_FILES = {
    "cassini serve --host": "an address to listen on (its help mentions --token-file)",
    "cassini sim trace --format": "the name of a trace format (dest trace_format)",
}


def test_every_path_argument_is_marked():
    """A path-looking argument is an input file, an output path (with a reason in
    OUTPUTS) or in NOT_FILES; a new command's file argument cannot slip through."""
    args = all_args()
    keys = {a.key for a in args}
    unmarked = [
        a.key
        for a in args
        if looks_like_a_path(a) and a.action.type not in MARKS and a.key not in NOT_FILES
    ]
    assert not unmarked, f"mark these type=files.input_file or output_path: {unmarked}"
    outputs = {a.key for a in args if a.action.type is files.output_path}
    assert outputs == set(OUTPUTS), "every output_path argument needs its reason in OUTPUTS"
    assert set(NOT_FILES) <= keys, "NOT_FILES names an argument that no longer exists"
    inputs = {a.key for a in args if a.action.type in (files.input_file, files.input_dir)}
    assert set(USES) <= inputs, f"USES names arguments that read no file: {set(USES) - inputs}"


# -- valid examples (each cut in half for the truncated case) -------------------------------
def _repo(path: str) -> Callable[[Path], bytes]:
    return lambda _tmp: (ROOT / path).read_bytes()


def _worker_log(_tmp: Path) -> bytes:
    lines = []
    for i in range(9):  # odd: its first half ends inside a line
        t = 100.0 + 0.1 * i
        lines.append(
            f'{{"start": {t:.3f}, "comm_start": {t + 0.06:.3f}, "end": {t + 0.1:.3f}, '
            f'"bytes_sent": 1250000}}'
        )
    return ("\n".join(lines) + "\n").encode()


def _pcap(tmp: Path) -> bytes:
    require_module("scapy", "the testbed extra: writes the example capture")
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    packets = []
    for i in range(40):
        p = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP() / (b"x" * 1000)
        p.time = 100.0 + 0.1 * (i // 10) + 0.001 * (i % 10)
        packets.append(p)
    wrpcap(str(tmp / "made.pcap"), packets)
    return (tmp / "made.pcap").read_bytes()


def _state(tmp: Path) -> bytes:
    path = tmp / "made.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, body TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('epoch_s', '1767225600.0');"
        "PRAGMA user_version = 1;"
    )
    conn.commit()
    conn.close()
    return path.read_bytes()


def _token_file(_tmp: Path) -> bytes:
    return b"# who may write\n" + b"0123456789abcdef0123456789abcdef scheduler\n"


def _certificate_and_key() -> tuple[bytes, bytes]:
    import datetime

    require_module("cryptography", "the dev extra: makes the example certificate")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


EXAMPLES: dict[str, Callable[[Path], bytes]] = {
    "score": _repo("cassini/data/example_score.json"),
    "advise": _repo("cassini/data/example_advise.json"),
    "recorder": _repo("tests/data/ddp_recorder_mlp448.jsonl"),
    "worker_log": _worker_log,
    "pcap": _pcap,
    "cluster": _repo("deploy/cluster-example.yaml"),
    "state": _state,
    "tokens": _token_file,
    "cert": lambda _tmp: _certificate_and_key()[0],
    "key": lambda _tmp: _certificate_and_key()[1],
    "sim_config": _repo("experiments/configs/sim_paper.yaml"),
    "trace_csv": _repo("tests/data/traces/csv/jobs.csv"),
    "profile": lambda _tmp: (
        b'{"id": "tiny", "iteration_time_s": 0.2, '
        b'"phases": [{"start_s": 0.1, "duration_s": 0.1, "rate_bps": 1e9}]}\n'
    ),
    "host_table": _repo("tests/data/topologies/hosts_irregular.csv"),
    "testbed_config": _repo("experiments/configs/fair_two_jobs.yaml"),
    "kubeconfig": lambda _tmp: (
        b"apiVersion: v1\nkind: Config\ncurrent-context: replay\nclusters:\n"
        b"- name: replay\n  cluster:\n    server: https://127.0.0.1:9\nusers:\n"
        b"- name: replay\n  user:\n    token: not-a-real-token\ncontexts:\n"
        b"- name: replay\n  context:\n    cluster: replay\n    user: replay\n"
    ),
}


@dataclass(frozen=True)
class Use:
    """One way to call a command so that it reads the fuzzed file: extra arguments, in
    which ``{path}`` is the file (else it goes where the argument goes) and
    ``{valid:NAME}`` a valid example; ``example`` names the valid file of this use."""

    args: tuple[str, ...]
    example: str
    label: str = ""
    #: cases that are not errors for this use, and why
    fine: tuple[tuple[str, str], ...] = ()


SERVE = ("--state", ":memory:", "--port", "0")
USES: dict[str, tuple[Use, ...]] = {
    "cassini score file": (Use((), "score"),),
    "cassini advise file": (Use((), "advise"),),
    "cassini profile file": (
        Use(("--from", "recorder"), "recorder", "recorder"),
        Use(("--from", "worker-log"), "worker_log", "worker-log"),
        Use(("--from", "pcap", "--src-ip", "10.0.0.1"), "pcap", "pcap"),
    ),
    "cassini profile --starts-log": (
        Use(("--from", "pcap", "--src-ip", "10.0.0.1", "{valid:pcap}"), "worker_log"),
    ),
    "cassini serve --cluster": (Use(SERVE, "cluster"),),
    "cassini serve --state": (
        Use(
            ("--port", "0"),
            "state",
            fine=(
                ("missing", "a state file that is not there is made (documented)"),
                (
                    "empty",
                    "an empty file is SQLite's new database (schema version 0), migrated in "
                    "place: tests/test_service_state.py::test_an_older_schema_is_migrated",
                ),
            ),
        ),
    ),
    "cassini serve --token-file": (Use(SERVE, "tokens"),),
    "cassini serve --tls-cert": (Use((*SERVE, "--tls-key", "{valid:key}"), "cert"),),
    "cassini serve --tls-key": (Use((*SERVE, "--tls-cert", "{valid:cert}"), "key"),),
    "cassini serve --token-review-ca": (
        Use(
            (
                *SERVE,
                "--token-review",
                "https://127.0.0.1:9/apis/authentication.k8s.io/v1/tokenreviews",
                "--token-review-user",
                "system:serviceaccount:a:b",
            ),
            "cert",
        ),
    ),
    "cassini sim run config": (Use(("--out", "{out}"), "sim_config"),),
    "cassini sim sweep config": (Use(("--out", "{out}"), "sim_config"),),
    "cassini sim trace what": (
        Use(("{path}", "--out", "{out}"), "sim_config", "CONFIG"),
        Use(("convert", "{path}", "--out", "{out}"), "trace_csv", "convert"),
    ),
    "cassini sim trace --profiles": (
        Use(("convert", "{valid:trace_csv}", "--out", "{out}"), "profile"),
    ),
    "cassini sim topo show file": (Use((), "host_table"),),
    "testbed run config": (Use(("--out", "{out}"), "testbed_config"),),
    "mltcp select --cgroup": (Use((), ""),),  # a folder: DIR_CASES, no example
    "cassini serve --kubeconfig": (Use(("--port", "0", "--kube"), "kubeconfig"),),
    "cassini cluster from-kube --kubeconfig": (Use((), "kubeconfig"),),
    "cassini cluster show file": (Use((), "cluster"),),
}


def input_args() -> list[Arg]:
    return [a for a in all_args() if a.action.type in (files.input_file, files.input_dir)]


def fuzz_params() -> list[object]:
    params = []
    for arg in input_args():
        for use in USES.get(arg.key, (Use((), ""),)):
            for case in DIR_CASES if arg.action.type is files.input_dir else CASES:
                label = f"{arg.key}[{use.label}]" if use.label else arg.key
                params.append(pytest.param(arg, use, case, id=f"{label}-{case}"))
    return params


# -- running a command in this process ----------------------------------------------------
class WentOn(AssertionError):
    """The command went past reading its files into the real work."""


STUBS = (
    ("cassini.service.cli", "listen"),
    ("cassini.sim.report.run", "simulate_config"),
    ("cassini.sim.report.sweep", "run_sweep"),
    ("testbed.run", "run_experiment"),
    ("mltcp.admin", "select"),
)


@pytest.fixture
def no_real_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps after reading the files fail the test instead of running."""
    for module, name in STUBS:

        def stub(*args: object, _name: str = f"{module}.{name}", **kwargs: object) -> None:
            raise WentOn(f"went on to {_name} with a bad file")

        monkeypatch.setattr(importlib.import_module(module), name, stub)


def run_main(program: str, argv: list[str]) -> tuple[int, str]:
    """Exit status and standard error of ``program``'s ``main(argv)`` in this process."""
    main = importlib.import_module(console_scripts()[program]).main
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, err.getvalue()


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]  # fmt: skip


def _capabilities(new: list[_CapData] | None = None) -> list[_CapData]:
    """This thread's capability sets (capget), or set them to *new* (capset)."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)(*(new or ()))
    call = libc.capset if new is not None else libc.capget
    if call(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset" if new is not None else "capget")
    return [_CapData(d.effective, d.permitted, d.inheritable) for d in data]


@contextlib.contextmanager
def without_file_override() -> Iterator[None]:
    """Root without the power to read past a file's mode while the block runs (this
    thread's effective set loses CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH; the uid stays 0,
    so what root owns with an owner bit set, such as a checkout in a 0700 folder, still
    opens)."""
    if os.geteuid() != 0:
        yield
        return
    saved = _capabilities()
    dropped = [_CapData(d.effective, d.permitted, d.inheritable) for d in saved]
    dropped[0].effective &= ~((1 << CAP_DAC_OVERRIDE) | (1 << CAP_DAC_READ_SEARCH))
    _capabilities(dropped)
    try:
        yield
    finally:
        _capabilities(saved)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temporary folder whose mode-000 leftovers are made removable again at the end."""
    path = Path(tempfile.mkdtemp(prefix="filefuzz-"))
    yield path
    for p in path.rglob("*"):
        with contextlib.suppress(OSError):
            p.chmod(0o700 if p.is_dir() else 0o600)
    shutil.rmtree(path, ignore_errors=True)


def make_case(case: str, example: bytes, path: Path) -> None:
    if case == "empty":
        path.write_bytes(b"")
    elif case == "truncated":
        path.write_bytes(example[: len(example) // 2])
    elif case == "random":  # no NUL byte: the UTF-8 check must see it (nul has those)
        path.write_bytes(random.Random(30).randbytes(4096).replace(b"\0", b"\xff"))
    elif case == "nul":
        path.write_bytes(b"\0" * 4096)
    elif case in ("directory", "empty-dir"):
        path.mkdir()
    elif case == "file":
        path.write_bytes(b"not a folder\n")
    elif case == "unreadable" and not example:
        path.mkdir()
        path.chmod(0)
    elif case == "unreadable":
        path.write_bytes(example)
        path.chmod(0)


def snapshot(path: Path) -> tuple[object, ...]:
    """What the file is: absent, a folder and its entries, or its bytes and mtime (ns)."""
    if not path.exists():
        return ("missing",)
    if path.is_dir():
        return ("dir", sorted(p.name for p in path.iterdir()))
    st = path.stat()
    mode = stat.S_IMODE(st.st_mode)
    path.chmod(0o600)
    data = path.read_bytes()
    path.chmod(mode)
    return ("file", data, st.st_mtime_ns, mode)


def build_argv(arg: Arg, use: Use, bad: Path, tmp: Path) -> list[str]:
    """The command line: subcommands, the use's arguments with their placeholders filled,
    the bad file where ``arg`` goes, and fillers for required arguments still missing."""
    made: dict[str, Path] = {}

    def valid(name: str) -> str:
        if name not in made:
            made[name] = tmp / f"valid-{name}{suffix(name)}"
            made[name].write_bytes(EXAMPLES[name](tmp))
        return str(made[name])

    def fill(word: str) -> str:
        if word == "{path}":
            return str(bad)
        if word == "{out}":
            return str(tmp / "out")
        m = re.fullmatch(r"\{valid:(\w+)\}", word)
        return valid(m.group(1)) if m else word

    extra = [fill(w) for w in use.args]
    a = arg.action
    target = (
        []
        if "{path}" in use.args
        else ([a.option_strings[0], str(bad)] if a.option_strings else [str(bad)])
    )
    parser = importlib.import_module(console_scripts()[arg.command[0]]).build_parser()
    for name in arg.command[1:]:
        parser = next(
            x.choices[name] for x in parser._actions if isinstance(x, argparse._SubParsersAction)
        )
    fillers = []
    for other in parser._actions:
        if other is a or other.dest == a.dest or not other.required:
            continue
        if isinstance(other, argparse._SubParsersAction):
            continue
        if any(o in use.args for o in other.option_strings):
            continue
        if not other.option_strings:
            continue  # a required positional other than the target: the use gives it
        value = (
            str(tmp / f"out-{other.dest}")
            if other.type is files.output_path
            else str(next(iter(other.choices)))
            if other.choices
            else "1"
        )
        fillers += [other.option_strings[0], value]
    return [*arg.command[1:], *extra, *fillers, *target]


def suffix(example: str) -> str:
    return {
        "score": ".json",
        "advise": ".json",
        "recorder": ".jsonl",
        "worker_log": ".jsonl",
        "pcap": ".pcap",
        "cluster": ".yaml",
        "kubeconfig": ".yaml",
        "state": ".sqlite",
        "tokens": ".txt",
        "cert": ".pem",
        "key": ".pem",
        "sim_config": ".yaml",
        "trace_csv": ".csv",
        "profile": ".json",
        "host_table": ".csv",
        "testbed_config": ".yaml",
    }.get(example, "")


@pytest.mark.parametrize(("arg", "use", "case"), fuzz_params())
def test_bad_file_exits_2_with_one_line(arg, use, case, open_tmp, no_real_work):
    fine = dict(use.fine)
    assert use.example or case != "truncated", (
        f"{arg.key} reads a file: add a Use with a valid example to USES in {__file__}"
    )
    folder = arg.action.type is files.input_dir
    example = EXAMPLES[use.example](open_tmp) if use.example else b"" if folder else b"{}\n"
    bad = open_tmp / f"bad-{case}{suffix(use.example)}"
    make_case(case, example, bad)
    argv = build_argv(arg, use, bad, open_tmp)
    before = snapshot(bad)
    if case in fine:
        # not an error for this argument (the reason is in USES): the command goes on
        with pytest.raises(WentOn):
            run_main(arg.command[0], argv)
        return
    if case == "unreadable":
        # the same command once as root given a folder, so that every module it imports
        # is loaded before it runs without the file override
        warm = open_tmp / "warm"
        warm.mkdir()
        run_main(arg.command[0], [str(warm) if w == str(bad) else w for w in argv])
        with without_file_override():
            code, err = run_main(arg.command[0], argv)
    else:
        code, err = run_main(arg.command[0], argv)
    lines = err.strip().splitlines()
    shown = f"{' '.join(arg.command)} {' '.join(argv)}\n{err}"
    assert code == 2, shown
    assert len(lines) == 1, shown
    assert "Traceback" not in err, shown
    assert str(bad) in lines[0], shown
    assert re.search(SAYS[case], lines[0]), shown
    assert snapshot(bad) == before, f"the command changed the file: {shown}"


# -- at the process level -----------------------------------------------------------------
def script(program: str) -> list[str]:
    """The installed console script, else the module run as one (the same entry)."""
    path = Path(sys.executable).parent / program
    if path.exists():
        return [str(path)]
    module = console_scripts()[program]
    return [sys.executable, "-c", f"import sys, {module} as m; sys.exit(m.main())"]


@pytest.mark.parametrize(
    ("program", "args", "case"),
    [
        ("cassini", ["score"], "empty"),
        ("cassini", ["serve", "--state", ":memory:", "--port", "0", "--cluster"], "random"),
        ("cassini", ["sim", "topo", "show"], "directory"),
        ("testbed", ["run"], "truncated"),
    ],
    ids=["cassini-score-empty", "cassini-serve-cluster-random", "sim-topo-dir", "testbed-run-cut"],
)
def test_console_script_exits_2_without_traceback(program, args, case, open_tmp):
    example = {"score": "score", "serve": "cluster", "sim": "host_table", "run": "testbed_config"}
    name = example[args[0]]
    bad = open_tmp / f"bad{suffix(name)}"
    make_case(case, EXAMPLES[name](open_tmp), bad)
    before = snapshot(bad)
    r = subprocess.run(
        [*script(program), *args, str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert re.search(SAYS[case], lines[0]), r.stderr
    assert snapshot(bad) == before
