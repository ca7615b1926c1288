"""The ``mltcp`` command line against a fake kernel (no root, nothing of this host's
touched): the sysctls are files in a temporary directory, the pinned maps dictionaries,
and ``bpftool``/``ip``/``ss`` answered by :class:`FakeKernel`.  What the commands say and
exit with (cli.py's docstring: 2 for bad parameters, 1 for any other problem, one line
each), as a user without root, on a reload, on values finer than the kernel stores, and
what ``unload`` and ``status`` do about network namespaces that select our controls."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from mltcp import cli, pinned, variants
from mltcp.admin import cgroup, netns, register, state
from mltcp.policy import MltcpParams

# the package exports functions of these names, hiding the modules
build = importlib.import_module("mltcp.admin.build")
status = importlib.import_module("mltcp.admin.status")

DEFAULT_CC = "cubic"


class FakeMap:
    """A pinned map: a dictionary per pin path, held by the fake kernel."""

    def __init__(self, kernel: FakeKernel, path: str, key_size: int, value_size: int) -> None:
        if os.geteuid() != 0:  # as bpf(2) answers a user without CAP_BPF
            raise PermissionError(1, "Operation not permitted")
        if not Path(path).exists():
            raise FileNotFoundError(2, "No such file or directory", path)
        self.entries = kernel.maps.setdefault(path, {})
        self.key_size, self.value_size, self.fd = key_size, value_size, 3

    def lookup(self, key: bytes) -> bytes | None:
        return self.entries.get(key)

    def update(self, key: bytes, value: bytes) -> None:
        assert len(key) == self.key_size and len(value) == self.value_size
        self.entries[key] = value

    def iter_keys(self):
        yield from list(self.entries)

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeMap:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class FakeKernel:
    """The sysctls, pins, named namespaces and commands ``mltcp`` uses, faked.  Network
    namespaces are files (``proc/PID/ns/net``, ``netns/NAME``): one file, one namespace
    (a hard link: the same one); ``ss`` answers each one's :attr:`sockets`."""

    def __init__(self, root: Path) -> None:
        self.sysctl, self.pins, self.netns_dir = root / "sysctl", root / "bpf", root / "netns"
        self.proc = root / "proc"
        for d in (self.sysctl, self.pins, self.netns_dir, self.proc / "1" / "ns"):
            d.mkdir(parents=True)
        (self.proc / "1" / "ns" / "net").touch()  # the init namespace, ours too
        (self.proc / "self" / "ns").mkdir(parents=True)
        os.link(self.proc / "1" / "ns" / "net", self.proc / "self" / "ns" / "net")
        self.sockets: dict[tuple[int, int], str] = {}  # namespace: `ss -Htina` output
        self.orphans: list[str] = []  # unregistered struct_ops still held by sockets
        self.write("tcp_available_congestion_control", "reno cubic")
        self.write("tcp_allowed_congestion_control", "reno cubic")
        self.write("tcp_congestion_control", DEFAULT_CC)
        self.maps: dict[str, dict[bytes, bytes]] = {}
        self.netns: dict[str, str] = {}  # name: the congestion control it selects
        self.commands: list[list[str]] = []

    def read(self, name: str) -> str:
        return (self.sysctl / name).read_text().strip()

    def write(self, name: str, value: str) -> None:
        (self.sysctl / name).write_text(value + "\n")

    def add_netns(self, name: str, cc: str = DEFAULT_CC) -> None:
        (self.netns_dir / name).touch()
        self.netns[name] = cc

    def add_process(self, pid: int, like: int | None = None) -> Path:
        """Process ``pid`` in a new network namespace, or in process ``like``'s."""
        (self.proc / str(pid) / "ns").mkdir(parents=True)
        net = self.proc / str(pid) / "ns" / "net"
        if like is None:
            net.touch()
        else:
            os.link(self.proc / str(like) / "ns" / "net", net)
        return net

    def add_sockets(self, ns_file: Path, ss_output: str) -> None:
        """``ss -Htina`` in the namespace of ``ns_file`` answers ``ss_output``."""
        st = os.stat(ns_file)
        self.sockets[(st.st_dev, st.st_ino)] = ss_output

    def switch(self, net: str | None) -> str:
        """The socket switcher read in namespace ``net``: each socket of ours moves to its
        base (a line ``LPORT RPORT BASE``)."""
        st = os.stat(net or self.proc / "self" / "ns" / "net")
        text = self.sockets.get((st.st_dev, st.st_ino), "")
        lines = []
        for cc in variants.CCS:
            for n in range(text.count(f" {cc} ")):
                lines.append(f"{5000 + n} 0 {variants.base_of(cc)}\n")
            text = text.replace(f" {cc} ", f" {variants.base_of(cc)} ")
        self.sockets[(st.st_dev, st.st_ino)] = text
        return "".join(lines)

    def struct_ops_dump(self) -> str:
        """``bpftool -j struct_ops dump``: ours registered, in use; the orphans, to be freed."""
        have = self.read("tcp_available_congestion_control").split()
        rows = [(c, "INUSE") for c in variants.CCS if c in have]
        rows += [(c, "TOBEFREE") for c in self.orphans]
        out = []
        for i, (name, st) in enumerate(rows):
            out.append({"bpf_map_info": {"id": 100 + i, "name": name}})
            value = {"common": {"state": f"BPF_STRUCT_OPS_STATE_{st}"}, "data": {"name": name}}
            out.append({"bpf_struct_ops_tcp_congestion_ops": value})
        return json.dumps(out)

    def snapshot(self) -> tuple:
        files = {p.name: p.read_text() for p in self.sysctl.iterdir()}
        pins = sorted(p.name for p in self.pins.iterdir())
        return files, pins, json.dumps(self.netns), repr(self.maps)

    def run(self, cmd: list[str], net: str | None = None) -> subprocess.CompletedProcess[str]:
        self.commands.append(cmd)
        out, err, rc = "", "", 0
        if cmd[0] == "nsenter":
            assert cmd[1].startswith("--net="), cmd
            return self.run(cmd[2:], net=cmd[1].removeprefix("--net="))
        if os.geteuid() != 0:
            out, err, rc = "", "Operation not permitted", 1
        elif cmd[:3] == ["bpftool", "struct_ops", "register"]:
            name = Path(cmd[3]).name.removesuffix(".bpf.o")
            self.write("tcp_available_congestion_control", self.available_with(name))
            for m in pinned.SHARED_MAPS:
                (self.pins / m).touch()
        elif cmd[:4] == ["bpftool", "struct_ops", "unregister", "name"]:
            have = self.read("tcp_available_congestion_control").split()
            self.write("tcp_available_congestion_control", " ".join(c for c in have if c != cmd[4]))
        elif cmd == ["ip", "netns", "list"]:
            out = "".join(f"{ns}\n" for ns in sorted(self.netns))
        elif cmd[:3] == ["ip", "netns", "exec"] and cmd[4] == "ss":
            return self.run(cmd[4:], net=str(self.netns_dir / cmd[3]))
        elif cmd[0] == "ss" and cmd[1] in ("-Htina", "-Htin"):
            st = os.stat(net or self.proc / "self" / "ns" / "net")
            out = self.sockets.get((st.st_dev, st.st_ino), "")
            if cmd[1] == "-Htin":  # without -a: no listeners (a socket is two lines)
                lines = out.splitlines(keepends=True)
                pairs = ["".join(lines[i : i + 2]) for i in range(0, len(lines), 2)]
                out = "".join(p for p in pairs if not p.startswith("LISTEN"))
        elif cmd == ["bpftool", "-j", "struct_ops", "dump"]:
            out = self.struct_ops_dump()
        elif cmd[:3] == ["bpftool", "iter", "pin"]:
            Path(cmd[4]).touch()
        elif cmd[0] == "cat":  # the pinned socket switcher, read in namespace `net`
            out = self.switch(net)
        elif cmd[:4] == ["bpftool", "-j", "cgroup", "show"]:
            out = "[]"
        elif cmd[:3] == ["ip", "netns", "exec"] and cmd[4] == "sysctl":
            ns = cmd[3]
            if ns not in self.netns:
                return subprocess.CompletedProcess(cmd, 1, "", f'Cannot open "{ns}"')
            if cmd[5] == "-n":
                out = self.netns[ns] + "\n"
            else:
                cc = cmd[6].split("=", 1)[1]
                if cc not in self.read("tcp_available_congestion_control").split():
                    return subprocess.CompletedProcess(cmd, 255, "", "No such file or directory")
                self.netns[ns] = cc
        else:
            raise AssertionError(f"unexpected command {cmd}")
        return subprocess.CompletedProcess(cmd, rc, out, err)

    def available_with(self, name: str) -> str:
        have = self.read("tcp_available_congestion_control").split()
        return " ".join(have + [name] * (name not in have))


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    return fake_kernel(tmp_path, monkeypatch)


def fake_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    """A :class:`FakeKernel` in ``tmp_path`` that every module of ``mltcp`` talks to."""
    k = FakeKernel(tmp_path)
    for module in (pinned, register, cgroup, status):
        monkeypatch.setattr(module, "SYSCTL", k.sysctl)
    for module in (pinned, register, cgroup, status, build):
        monkeypatch.setattr(module, "PIN_DIR", k.pins)
    for module in (cgroup, status):
        monkeypatch.setattr(module, "SELECT_PROG", k.pins / "mltcp_select")
    monkeypatch.setattr(register, "SWITCH_ITER", k.pins / "mltcp_switch_iter")

    def fake_map(path: str, key_size: int, value_size: int) -> FakeMap:
        return FakeMap(k, path, key_size, value_size)

    for module in (pinned, register, status):
        monkeypatch.setattr(module, "PinnedMap", fake_map)
    for module in (register, cgroup, netns):
        monkeypatch.setattr(module, "run", k.run)
    monkeypatch.setattr(netns, "NETNS_DIR", k.netns_dir)
    monkeypatch.setattr(netns, "PROC", k.proc, raising=False)  # (before: no PROC)
    monkeypatch.setattr(state, "STATE", tmp_path / "state.json")
    monkeypatch.setattr(register, "STATE", tmp_path / "state.json")

    def check_prerequisites() -> None:
        if os.geteuid() != 0:
            raise pinned.MltcpError("loading congestion controls needs root: run with sudo")

    monkeypatch.setattr(register, "check_prerequisites", check_prerequisites)
    monkeypatch.setattr(register, "build", lambda name: Path(f"/ebpf/{name}.bpf.o"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return k


def mltcp(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit status, standard output and standard error of ``mltcp ARGV``."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert len(err.splitlines()) == 1, err
    return err.strip()


# -- 1: without root ----------------------------------------------------------------------
AS_USER = [
    ["status"],
    ["status", "--json"],
    ["set", "--slope", "1.5"],
    ["mark", "j1"],
    ["assign-port", "5000", "j1"],
    ["select", "mltcp_reno", "--default"],
    ["select", "mltcp_cubic", "--netns", "ns1"],
    ["load"],
    ["unload"],
]


@pytest.mark.parametrize("argv", AS_USER, ids=[" ".join(a) for a in AS_USER])
def test_every_command_says_in_one_line_that_it_needs_root(kernel, capsys, monkeypatch, argv):
    assert mltcp(capsys, "load")[0] == 0
    kernel.add_netns("ns1")
    before = kernel.snapshot()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    code, out, err = mltcp(capsys, *argv)
    assert (code, out) == (1, "")
    assert one_line(err) == f"mltcp: {argv[0]} needs root: run with sudo"
    assert kernel.snapshot() == before


def test_bad_arguments_are_named_before_root_is_asked_for(kernel, capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    code, _, err = mltcp(capsys, "assign-port", "0", "j1")
    assert code == 2 and "PORT" in one_line(err)


# -- 3: a reload keeps the parameters -----------------------------------------------------
def test_a_reload_keeps_the_parameters_set_and_changes_only_those_given(kernel, capsys):
    code, out, _ = mltcp(capsys, "load")
    assert code == 0 and "slope 2.0, intercept 1.0, idle 10.0 ms, mode idle" in out
    assert mltcp(capsys, "set", "--slope", "1.5", "--no-scale-cut")[0] == 0
    code, out, _ = mltcp(capsys, "load")
    assert code == 0
    assert "slope 1.5, intercept 1.0" in out and "cut scaled" not in out
    assert register.read_config()  # the map was written
    from mltcp import admin

    assert admin.get_params() == MltcpParams(slope=1.5, scale_cut=False)
    code, out, _ = mltcp(capsys, "load", "--variant", "reno", "--intercept", "0.5")
    assert code == 0 and "slope 1.5, intercept 0.5" in out
    assert admin.get_params() == MltcpParams(slope=1.5, intercept=0.5, scale_cut=False)


def test_a_first_load_starts_from_the_defaults_with_the_flags_given(kernel, capsys):
    from mltcp import admin

    code, out, _ = mltcp(capsys, "load", "--mode", "exact")
    assert code == 0 and "mode exact" in out
    assert admin.get_params() == MltcpParams(mode="exact")


def test_a_reload_with_a_bad_combination_exits_2_and_changes_nothing(kernel, capsys):
    from mltcp import admin

    assert mltcp(capsys, "load", "--intercept", "4")[0] == 0
    code, _, err = mltcp(capsys, "load", "--slope", "61")  # 61 + 4 > 64
    assert code == 2 and "--slope + --intercept" in one_line(err)
    assert admin.get_params() == MltcpParams(intercept=4.0)


# -- 4: the kernel's resolution ------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, flag, resolution",
    [
        (["set", "--intercept", "0.0001"], "--intercept", "1/1024"),
        (["set", "--slope", "0.0001"], "--slope", "1/1024"),
        (["set", "--idle-ms", "1e-9"], "--idle-ms", "0.001 ms"),
        (["load", "--idle-ms", "0.0004"], "--idle-ms", "0.001 ms"),
    ],
)
def test_a_value_the_kernel_would_store_as_0_is_refused(kernel, capsys, argv, flag, resolution):
    from mltcp import admin

    assert mltcp(capsys, "load")[0] == 0
    code, out, err = mltcp(capsys, *argv)
    line = one_line(err)
    assert (code, out) == (2, "")
    assert line.startswith(f"mltcp: {flag} ") and resolution in line, line
    assert admin.get_params() == MltcpParams()


def test_set_and_load_print_the_values_the_kernel_stores(kernel, capsys):
    from mltcp import admin

    assert mltcp(capsys, "load")[0] == 0
    code, out, _ = mltcp(capsys, "set", "--intercept", "0.001", "--idle-ms", "0.0016")
    stored = admin.get_params()
    assert (stored.intercept, stored.idle_ms) == (1 / 1024, 0.002)
    assert code == 0 and f"intercept {1 / 1024}, idle 0.002 ms" in out
    code, out, _ = mltcp(capsys, "set", "--slope", "0")  # 0 is itself, not refused
    assert code == 0 and "slope 0.0," in out


# -- 5, 6: bad arguments exit 2 with one line naming them ------------------------------------
@pytest.mark.parametrize(
    "argv, named",
    [
        (["assign-port", "0", "j"], "PORT"),
        (["assign-port", "70000", "j"], "PORT"),
        (["select", "--netns", "X", "--job", "j"], "--job"),
        (["select", "--netns", "X", "--ecn"], "--ecn"),
        (["select", "--netns", "X", "--no-ecn"], "--no-ecn"),
        (["mark", ""], "JOB"),
        (["assign-port", "5000", ""], "JOB"),
    ],
)
def test_bad_arguments_exit_2_naming_them(kernel, capsys, argv, named):
    assert mltcp(capsys, "load")[0] == 0
    kernel.add_netns("X")
    before = kernel.snapshot()
    code, out, err = mltcp(capsys, *argv)
    assert (code, out) == (2, "")
    assert named in one_line(err)
    assert kernel.snapshot() == before


# -- 2: namespaces selecting our controls ---------------------------------------------------
def test_unload_puts_back_what_a_selected_namespace_had(kernel, capsys):
    kernel.add_netns("ns1", "reno")
    kernel.add_netns("ns2")
    assert mltcp(capsys, "load")[0] == 0
    assert mltcp(capsys, "select", "mltcp_cubic", "--netns", "ns1")[0] == 0
    assert mltcp(capsys, "select", "mltcp_reno", "--netns", "ns1")[0] == 0  # the first kept
    assert mltcp(capsys, "select", "mltcp_dctcp", "--netns", "ns2")[0] == 0
    assert kernel.netns == {"ns1": "mltcp_reno", "ns2": "mltcp_dctcp"}
    code, out, _ = mltcp(capsys, "unload")
    assert code == 0 and "mltcp_reno" in out
    assert kernel.netns == {"ns1": "reno", "ns2": DEFAULT_CC}
    assert not set(variants.CCS) & set(kernel.read("tcp_available_congestion_control").split())


def test_unload_refuses_while_a_namespace_selects_ours_by_hand_and_force_gives_its_base(
    kernel, capsys
):
    assert mltcp(capsys, "load")[0] == 0
    kernel.add_netns("byhand", "mltcp_cubic")  # `ip netns exec byhand sysctl -w ...`
    code, _, err = mltcp(capsys, "unload")
    assert code == 1 and "netns byhand selects mltcp_cubic" in one_line(err)
    assert "mltcp_cubic" in kernel.read("tcp_available_congestion_control")  # still loaded
    code, _, _ = mltcp(capsys, "unload", "--force")
    assert code == 0 and kernel.netns == {"byhand": "cubic"}


def test_status_reports_a_namespace_selecting_a_control_that_is_not_loaded(kernel, capsys):
    assert mltcp(capsys, "load", "--variant", "reno")[0] == 0
    kernel.add_netns("stale", "mltcp_cubic")  # left by an unload that did not put it back
    kernel.add_netns("fine", "mltcp_reno")
    code, out, _ = mltcp(capsys, "status")
    problems = [ln for ln in out.splitlines() if ln.startswith("problem:")]
    assert code == 0 and len(problems) == 1, out
    assert "netns stale selects mltcp_cubic, which is not loaded" in problems[0]
    code, out, _ = mltcp(capsys, "status", "--json")
    assert any("netns stale" in p for p in json.loads(out)["problems"])


def test_the_state_file_keeps_what_each_namespace_selected_before(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE", tmp_path / "state.json")
    saved = state.LoaderState(loaded=("mltcp_reno",), netns=(("a", "reno"), ("b", "bbr")))
    state.save_state(saved)
    assert json.loads((tmp_path / "state.json").read_text())["netns"] == {"a": "reno", "b": "bbr"}
    assert state.read_state() == saved and saved.netns_before() == {"a": "reno", "b": "bbr"}
    (tmp_path / "state.json").write_text('{"netns": ["a"]}')
    with pytest.raises(pinned.MltcpError, match="netns must map"):
        state.read_state()
