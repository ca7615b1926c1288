"""MLTCP in the running kernel: load/unload round trip, a namespace's flow really uses
mltcp_reno, iterations counted exactly in both boundary modes, live parameter changes,
clear errors.  Needs root, BTF, clang and bpftool; under CI=true missing ones fail."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import require, run_name
from helpers.mltcp_flows import take_mltcp

from mltcp import admin, marks, pinned, variants
from mltcp.policy import MltcpParams

pytestmark = pytest.mark.root
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
A, B = run_name("mltcp_a"), run_name("mltcp_b")  # this run's namespaces, no one else's
# in this run's own namespace B no other process can hold it; fixed because exact mode
# ties the port to a job (marks.assign_port) before the server starts
PORT = 7411


@pytest.fixture(scope="module")
def kernel():
    require(os.geteuid() == 0, "root")
    require(Path("/sys/kernel/btf/vmlinux").exists(), "kernel BTF")
    for tool in ("clang", "bpftool", "nsenter", "ss"):
        require(shutil.which(tool) is not None, f"{tool} (run make setup)")
    before = AVAILABLE.read_text().split()
    take_mltcp()  # a clean start after an aborted run, moving nobody's sockets
    names = admin.load("reno", MltcpParams(slope=1.0, intercept=0.5, idle_ms=10))
    yield names
    admin.unload()  # our sockets are closed: nothing to force
    ours = set(variants.CCS)
    # every congestion control that was not ours is still there; none of ours is
    assert [c for c in AVAILABLE.read_text().split() if c in before] == [
        c for c in before if c not in ours
    ]
    assert not ours & set(AVAILABLE.read_text().split())


@pytest.fixture
def netns(kernel):
    """Two namespaces joined by a veth pair: A 10.211.0.1, B 10.211.0.2."""

    def sh(*cmd):
        subprocess.run(cmd, check=True, capture_output=True)

    try:
        sh("ip", "netns", "add", A)
        sh("ip", "netns", "add", B)
        sh("ip", "link", "add", "mlt_va", "netns", A, "type", "veth", "peer", "mlt_vb", "netns", B)
        for ns, dev, ip in ((A, "mlt_va", "10.211.0.1/24"), (B, "mlt_vb", "10.211.0.2/24")):
            sh("ip", "-n", ns, "addr", "add", ip, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield
    finally:
        subprocess.run(["ip", "netns", "del", A], capture_output=True)
        subprocess.run(["ip", "netns", "del", B], capture_output=True)


SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.211.0.2", int(sys.argv[1]))); s.listen(1); print("ready", flush=True)
    c, _ = s.accept()
    while True:
        n = int.from_bytes(c.recv(4, socket.MSG_WAITALL), "big")
        if n == 0: break
        got = 0
        while got < n:
            got += len(c.recv(min(1 << 20, n - got)))
        c.sendall(b"k")
""")

CLIENT = textwrap.dedent("""
    import socket, sys, time
    # size and gap: one value, or comma-separated ones taken in turn (a step of bursts)
    cc, port, bursts, job = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[6]
    sizes = [int(x) for x in sys.argv[4].split(",")]
    gaps = [float(x) for x in sys.argv[5].split(",")]
    mark = None
    if job != "-":
        import mltcp; mark = lambda: mltcp.mark_iteration(job)
    s = socket.socket()
    if cc != "-":   # "-": keep what the host, namespace or cgroup gives
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    s.connect(("10.211.0.2", port))
    print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode(),
          s.getsockname()[1], flush=True)
    for i in range(bursts):
        payload = bytes(sizes[i % len(sizes)])
        s.sendall(len(payload).to_bytes(4, "big") + payload)
        s.recv(1)               # all bytes of this iteration acked by the application
        if mark: mark()
        time.sleep(gaps[i % len(gaps)])
    s.sendall((0).to_bytes(4, "big"))   # one last send after the gap ends the last iteration
    time.sleep(0.05)
""")


def run_pair(tmp_path, bursts, size, gap, job="-", cc="mltcp_reno", cgroup=None):
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "client.py").write_text(CLIENT)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    server = subprocess.Popen(
        [
            "nsenter",
            f"--net=/run/netns/{B}",
            sys.executable,
            str(tmp_path / "server.py"),
            str(PORT),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout.readline().strip() == "ready"
        # in a cgroup: the shell moves itself there, then becomes the client
        into = (
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup)] if cgroup else []
        )
        out = subprocess.run(
            [
                *into,
                "nsenter",
                f"--net=/run/netns/{A}",
                sys.executable,
                str(tmp_path / "client.py"),
                cc,
                str(PORT),
                str(bursts),
                ",".join(str(x) for x in (size if isinstance(size, list) else [size])),
                ",".join(str(x) for x in (gap if isinstance(gap, list) else [gap])),
                job,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        used, local_port = out.stdout.split()
        return used, int(local_port)
    finally:
        server.kill()
        server.wait()


def flow(local_port):
    rows = [f for f in admin.status(flows=True)["flows"] if f["local_port"] == local_port]
    assert len(rows) == 1, rows
    return rows[0]


def test_load_is_idempotent_and_listed(kernel):
    assert kernel == ["mltcp_reno"]
    assert admin.load("reno") == ["mltcp_reno"]
    assert "mltcp_reno" in AVAILABLE.read_text().split()
    assert "mltcp_reno" in pinned.allowed()


def test_namespace_flow_uses_mltcp_and_idle_mode_counts_iterations(tmp_path, netns):
    admin.set_params(MltcpParams(1.0, 0.5, idle_ms=10, mode="idle"))
    used, port = run_pair(tmp_path, bursts=6, size=200_000, gap=0.05)
    assert used == "mltcp_reno"
    f = flow(port)
    assert f["iterations"] == 6
    assert f["last_iteration_bytes"] == 200_004  # the 4-byte length prefix travels too


def test_idle_mode_counts_a_step_of_two_bursts_once(tmp_path, netns):
    """A DDP step as ResNet-50's flows send it (docs/mltcp_defaults.md): most of the
    gradients, a silence longer than idle_ms (the last bucket's backward), the last
    bucket, then the silence before the next step.  The kernel counts one iteration per
    step, of the step's bytes, not one per burst."""
    admin.set_params(MltcpParams(1.0, 0.5, idle_ms=10, mode="idle"))
    _, port = run_pair(tmp_path, bursts=12, size=[270_000, 30_000], gap=[0.02, 0.04])
    f = flow(port)
    # 6 steps: boundaries before each 30 kB burst (the first with no estimate yet, after
    # the first 270 kB); the last step's 30 kB is too little to end one (gap rule alone: 12)
    assert f["iterations"] == 6, f
    assert f["last_iteration_bytes"] == 300_008  # two 4-byte length prefixes


def test_exact_mode_counts_marked_iterations_without_idle_gaps(tmp_path, netns):
    admin.set_params(MltcpParams(1.0, 0.5, idle_ms=10, mode="exact"))
    marks.assign_port(PORT, "job-x")
    # gaps of 2 ms are below the idle threshold: only the marks delimit iterations
    used, port = run_pair(tmp_path, bursts=5, size=150_000, gap=0.002, job="job-x")
    f = flow(port)
    assert f["iterations"] == 5 and f["job"] == marks.job_key("job-x")
    admin.set_params(MltcpParams(1.0, 0.5, idle_ms=10, mode="idle"))
    _, port = run_pair(tmp_path, bursts=5, size=150_000, gap=0.002)
    # the idle detector sees no gap: no boundary, so no statistics were ever written
    assert [f for f in admin.status(flows=True)["flows"] if f["local_port"] == port] == []


def test_parameter_changes_take_effect_without_reload(tmp_path, netns):
    # F at the end of an iteration is intercept + slope (the whole iteration acked)
    admin.set_params(MltcpParams(2.0, 0.5, idle_ms=10))
    _, port = run_pair(tmp_path, bursts=3, size=300_000, gap=0.05)
    assert flow(port)["factor"] == pytest.approx(2.5, abs=0.01)
    admin.set_params(MltcpParams(0.25, 0.75, idle_ms=10))
    _, port = run_pair(tmp_path, bursts=3, size=300_000, gap=0.05)
    assert flow(port)["factor"] == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("variant", ["cubic", "dctcp"])
def test_other_variants_track_iterations_in_the_kernel(tmp_path, netns, variant):
    """mltcp_cubic (the kernel's CUBIC through kfuncs, our state after its own) and
    mltcp_dctcp share the iteration tracking: counts, bytes and F are the same."""
    name = admin.load(variant)[0]
    admin.set_params(MltcpParams(2.0, 0.5, idle_ms=10, mode="idle"))
    used, port = run_pair(tmp_path, bursts=4, size=250_000, gap=0.05, cc=name)
    assert used == name
    f = flow(port)
    assert f["iterations"] == 4
    assert f["last_iteration_bytes"] == 250_004
    assert f["factor"] == pytest.approx(2.5, abs=0.01)


@pytest.fixture
def cgroup(kernel, run_cgroup):
    """This run's fresh cgroup (conftest), once MLTCP is loaded."""
    return run_cgroup


def test_cgroup_selection_sets_only_that_cgroups_sockets_and_ties_them_to_a_job(
    tmp_path, netns, cgroup
):
    admin.set_params(MltcpParams(1.0, 0.5, idle_ms=10, mode="exact"))
    admin.select("mltcp_reno", cgroup=cgroup, job="job-cg")
    admin.select("mltcp_reno", cgroup=cgroup, job="job-cg")  # idempotent
    try:
        # no setsockopt in the client: the sock_ops program chose the congestion control,
        # and tied the socket to the job, so the trainer's marks delimit its iterations
        used, port = run_pair(tmp_path, 4, 150_000, 0.002, job="job-cg", cc="-", cgroup=cgroup)
        assert used == "mltcp_reno"
        f = flow(port)
        assert f["iterations"] == 4 and f["job"] == marks.job_key("job-cg")
        # the same client outside the cgroup keeps the namespace's default
        used, _ = run_pair(tmp_path, 1, 10_000, 0.0, cc="-")
        assert used != "mltcp_reno"
    finally:
        admin.set_params(MltcpParams(1.0, 0.5, idle_ms=10, mode="idle"))


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "mltcp.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["set", "--slope", "-1"], "slope must be >= 0"),
        (["set", "--intercept", "0"], "intercept must be > 0"),
        (["set", "--slope", "nan"], "finite"),
        (["load", "--idle-ms", "0"], "--idle-ms"),  # the flag, not the field
    ],
)
def test_bad_parameters_exit_2_with_one_line(kernel, args, message):
    r = cli(*args)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_scale_cut_goes_through_the_config_map_and_survives_other_changes(kernel):
    def params():
        r = cli("status", "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["params"]

    try:
        assert cli("set", "--scale-cut").returncode == 0
        assert params()["scale_cut"] is True and admin.get_params().scale_cut
        assert cli("set", "--slope", "2").returncode == 0  # other fields keep it
        assert params()["scale_cut"] is True and params()["slope"] == 2.0
        assert cli("set", "--no-scale-cut").returncode == 0
        assert params()["scale_cut"] is False
    finally:
        admin.set_params(MltcpParams())


def test_unload_refuses_while_a_socket_uses_it(kernel):
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.socket()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"mltcp_reno")
    t = threading.Thread(target=lambda: srv.accept())
    t.start()
    c.connect(srv.getsockname())
    t.join()
    try:
        r = cli("unload")
        assert r.returncode == 1 and "still in use" in r.stderr and "--force" in r.stderr
        assert "mltcp_reno" in AVAILABLE.read_text()
    finally:
        c.close()
        srv.close()


def test_select_needs_a_target_and_a_loaded_cc(kernel):
    r = cli("select", "mltcp_nope", "--default")
    assert r.returncode == 2 and "unknown congestion control mltcp_nope" in r.stderr
    r = cli("select", "mltcp_reno", "--cgroup", "/tmp")
    assert r.returncode == 2 and "not a cgroup directory" in r.stderr  # a bad path: usage
    r = cli("select", "mltcp_reno", "--netns", "x", "--job", "j")
    assert r.returncode == 2 and "--job goes with --cgroup" in r.stderr  # a bad parameter


ECN_SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.211.0.2", int(sys.argv[1]))); s.listen(1); print("ready", flush=True)
    c, _ = s.accept()
    while c.recv(65536):
        pass
    info = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    cc = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode()
    print(cc, info[5] & 8, flush=True)   # tcpi_options & TCPI_OPT_ECN
""")

ECN_CLIENT = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.connect(("10.211.0.2", int(sys.argv[1])))
    s.sendall(bytes(200_000))
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    cc = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode()
    print(cc, info[5] & 8, flush=True)
    s.close()
""")


def ecn_pair(tmp_path, client_cgroup, server_cgroup):
    """One connection A -> B; each end in the cgroup or not; (cc, ECN negotiated) per end."""
    (tmp_path / "es.py").write_text(ECN_SERVER)
    (tmp_path / "ec.py").write_text(ECN_CLIENT)

    def into(cg):
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cg)] if cg else []

    server = subprocess.Popen(
        [*into(server_cgroup), "nsenter", f"--net=/run/netns/{B}", sys.executable,
         str(tmp_path / "es.py"), str(PORT)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout.readline().strip() == "ready"
        client = subprocess.run(
            [*into(client_cgroup), "nsenter", f"--net=/run/netns/{A}", sys.executable,
             str(tmp_path / "ec.py"), str(PORT)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert client.returncode == 0, client.stderr
        server_line = server.stdout.readline().split()
    finally:
        server.kill()
        server.wait()
    c_cc, c_ecn = client.stdout.split()
    return (c_cc, int(c_ecn) != 0), (server_line[0], int(server_line[1]) != 0)


@pytest.mark.parametrize(
    "cc, ecn, client_in, server_in, negotiated",
    [
        ("dctcp_bpf", None, True, True, True),  # active and passive end both select it
        ("mltcp_dctcp", None, True, True, True),
        ("dctcp_bpf", None, True, False, False),  # the listener outside refuses (tcp_ecn 0)
        ("dctcp_bpf", None, False, True, False),  # the client outside never asks
        ("mltcp_reno", None, True, True, False),  # Reno does not need ECN: not asked
        ("mltcp_reno", True, True, True, True),  # ... unless --ecn: the sock_ops answer alone
    ],
)
def test_ecn_is_negotiated_per_socket_by_the_cgroup_selection_with_tcp_ecn_off(
    tmp_path, netns, cgroup, cc, ecn, client_in, server_in, negotiated
):
    admin.load("all")
    for ns in (A, B):
        subprocess.run(
            ["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_ecn=0"], check=True
        )
    admin.select(cc, cgroup=cgroup, ecn=ecn)
    (c_cc, c_ecn), (s_cc, s_ecn) = ecn_pair(
        tmp_path, cgroup if client_in else None, cgroup if server_in else None
    )
    assert (c_cc == cc, s_cc == cc) == (client_in, server_in)
    assert (c_ecn, s_ecn) == (negotiated, negotiated)


def test_pinned_maps_have_the_sizes_of_the_one_definition(kernel, cgroup):
    """The kernel's key and value sizes of every pinned map are mltcp.layout's (held to
    ebpf/mltcp_maps.h by tests/test_mltcp_layout.py); a map of another size is refused."""
    from mltcp import layout
    from mltcp.bpfmap import LayoutMismatch, PinnedMap, map_info

    admin.select("mltcp_reno", cgroup=cgroup)  # pins mltcp_cgroup_cfg too
    for name, (key, value) in layout.MAPS.items():
        with PinnedMap(str(pinned.PIN_DIR / name), key.size, value.size) as m:
            info = map_info(m.fd)
        assert (info["key_size"], info["value_size"]) == (key.size, value.size), name
    with pytest.raises(LayoutMismatch):
        PinnedMap(str(pinned.PIN_DIR / "mltcp_flows"), 4, 24)
