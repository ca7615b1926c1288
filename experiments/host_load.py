"""The host a figure is measured on: its CPU, and its load now (``/proc/loadavg`` and the
busy share of ``/proc/stat`` over a short sample).  Linux only."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from experiments.figures import HostLoad


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs together, from ``/proc/stat``'s ``cpu`` line;
    idle and iowait count as not busy."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    if fields[0] != "cpu":
        raise RuntimeError(f"/proc/stat: first line is not the cpu total: {fields[:2]}")
    values = [int(v) for v in fields[1:]]
    # user nice system idle iowait irq softirq steal (guest times are inside user/nice)
    total = sum(values[:8])
    idle = values[3] + values[4]
    return total - idle, total


def sample(seconds: float = 2.0) -> HostLoad:
    """The host's load: the 1-minute load average now and the CPUs' busy share over the
    next ``seconds``."""
    busy0, total0 = _cpu_times()
    time.sleep(seconds)
    busy1, total1 = _cpu_times()
    dt = total1 - total0
    fraction = (busy1 - busy0) / dt if dt > 0 else 0.0
    load1 = float(Path("/proc/loadavg").read_text().split()[0])
    return HostLoad(load1, min(1.0, max(0.0, fraction)), os.cpu_count() or 1, seconds)


def machine() -> dict[str, object]:
    """CPU model, online cores and kernel release of this host."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model, "cores": os.cpu_count() or 1, "kernel": platform.release()}


if __name__ == "__main__":
    from experiments import not_a_command

    not_a_command("experiments.host_load", "run python -m experiments.headlines --help")
