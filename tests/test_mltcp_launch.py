"""`testbed launch` with an MLTCP congestion control (dry run, no root): every node loads
it in exact mode, selects it for the job's cgroup (so NCCL's own sockets get it before
their SYN and are tied to the job), joins that cgroup, and starts torchrun there with the
NCCL socket variables and MLTCP_JOB set."""

import argparse
import subprocess

import pytest

from testbed.launch import launch_commands


def args(cc: str) -> argparse.Namespace:
    return argparse.Namespace(
        nodes="gpu1,gpu2",
        gpus_per_node=4,
        iterations=50,
        width=512,
        layers=2,
        cc=cc,
        iface="eth1",
        port=29500,
        shift_s=0.0,
        period_s=0.0,
        out="log.jsonl",
    )


@pytest.mark.parametrize("cc, variant", [("mltcp_dctcp", "dctcp"), ("mltcp_reno", "reno")])
def test_launch_selects_mltcp_for_the_jobs_cgroup_on_every_node(cc, variant):
    cmds = launch_commands(args(cc))
    assert [n for n, _ in cmds] == ["gpu1", "gpu2"]
    for rank, (_, cmd) in enumerate(cmds):
        steps = cmd.split(" && ")
        job = "ddp-gpu1-29500"
        load = f'sudo env PATH="$PATH" mltcp load --variant {variant} --mode exact'
        select = f'sudo env PATH="$PATH" mltcp select {cc} --cgroup "$CG" --job {job}'
        join = 'echo $$ | sudo tee "$CG/cgroup.procs" >/dev/null'
        # in this order: cgroup, load, select, join, then torchrun inside the cgroup
        assert steps[0].startswith("CG=") and steps[0].endswith(f"/mltcp-{job}")
        assert steps[1:5] == ['sudo mkdir -p "$CG"', load, select, join]
        run = steps[5]
        for var in (
            "NCCL_IB_DISABLE=1",
            "NCCL_NET=Socket",
            "NCCL_SOCKET_NTHREADS=1",
            "NCCL_NSOCKS_PERTHREAD=1",
            "NCCL_SOCKET_IFNAME=eth1",
            f"MLTCP_JOB={job}",
        ):
            assert var in run.split(" torchrun ")[0]
        assert f"--node_rank={rank}" in run and "-m testbed.ddp_worker --torchrun" in run
        assert "sysctl" not in cmd  # nothing host-wide
        assert subprocess.run(["bash", "-n", "-c", cmd]).returncode == 0


def test_launch_with_a_kernel_cc_sets_it_host_wide_and_no_job():
    _, cmd = launch_commands(args("cubic"))[0]
    assert cmd.startswith("sudo sysctl -qw net.ipv4.tcp_congestion_control=cubic && ")
    assert "mltcp" not in cmd and "MLTCP_JOB" not in cmd and "NCCL_SOCKET_NTHREADS=1" in cmd
