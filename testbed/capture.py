"""A packet capture on an emulated host: tcpdump on its interface while a block runs
(headers only), for :func:`cassini.measure.profile_from_pcap`."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any


class Capture:
    """tcpdump on a host's interface while the block runs (headers only, written to
    ``pcap``).  ``with Capture(cluster, "h1", path): ...``"""

    def __init__(self, cluster: Any, host: str, pcap: Path | str, snaplen: int = 96) -> None:
        self.cluster, self.host, self.pcap, self.snaplen = cluster, host, Path(pcap), snaplen
        self.proc: Any = None

    def __enter__(self) -> Capture:
        intf = f"{self.host}-eth0"
        self.proc = self.cluster.popen(
            self.host,
            [
                "tcpdump",
                "-i",
                intf,
                "-w",
                str(self.pcap),
                "-s",
                str(self.snaplen),
                "-B",
                "16384",  # KiB: the kernel's capture buffer, so bursts are not dropped
                "-U",
                "-n",
                "ip",
            ],
        )
        time.sleep(1.0)  # tcpdump needs a moment before it captures
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - never leave tcpdump behind
                self.proc.kill()


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.capture")
