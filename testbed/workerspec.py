"""What one worker process is told: a frozen :class:`WorkerSpec`, written as JSON next to
the worker's log by the runner and read back by :mod:`testbed.worker` (synthetic jobs) and
:mod:`testbed.ddp_worker` (PyTorch DDP; also built from torchrun's arguments on real GPU
nodes).  Its defaults are the only ones: the workers read attributes, never ``.get``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from cassini import schema


@dataclass(frozen=True)
class WorkerSpec:
    """One rank of one job.  Times in seconds (wall clock), sizes in bytes."""

    job_id: str
    rank: int
    world_size: int
    iterations: int
    out: str  # this rank's JSON-lines log
    kind: str = "synthetic"  # synthetic | ddp | model
    addrs: tuple[str, ...] = ()  # every rank's address, rank order (empty: torchrun's env)
    port: int = 0  # the ring's (synthetic) or the rendezvous's (ddp) port
    iface: str = ""  # the interface gloo binds to (GLOO_SOCKET_IFNAME)
    backend: str = "gloo"  # torch.distributed backend (nccl on GPU nodes)
    cc: str | None = None  # congestion control set on the synthetic ring's sockets
    warmup: bool = True  # synthetic: one untimed all-reduce before the first iteration
    compute_s: float = 0.0  # synthetic: compute per iteration; ddp: extra sleep per step
    bytes: int = 1_000_000  # synthetic: all-reduced per iteration
    jitter: float = 0.0  # synthetic: compute varies by +- this fraction
    seed: int = 0
    threads: int = 1  # torch intra-op threads
    width: int = 256  # ddp MLP
    layers: int = 3
    batch: int = 32
    model: str | None = None  # kind model: the architecture (testbed.models)
    compute: str = "replay"  # kind model: replay the calibration, or cpu (real compute)
    calibration: str | None = None  # kind model: calibration file
    scale: float = 1.0  # kind model: parameter sizes x scale
    shift_s: float = 0.0  # start offset after the epoch (within the period when held)
    period_s: float | None = None  # held by the time-shift agent to this period
    tolerance_s: float | None = None  # agent: re-align once later than this
    release_board: str | None = None  # held: the run's release board (testbed.releaseboard)
    partners: tuple[str, ...] = ()  # held: the jobs released together with this one
    clock_offset_s: float = 0.0  # an injected clock error of the job's hosts
    start_gate: str | None = None  # go file with the common epoch (testbed.startgate)
    epoch_s: float | None = None  # a fixed epoch instead of the go file
    mltcp_job: str | None = None  # MLTCP exact mode: the job whose iterations are marked
    mltcp_marks_fd: int | None = None  # inherited descriptor of the marks map
    mltcp_marker: bool | None = None  # this rank marks iterations (None: rank 0 does)

    @property
    def marks_iterations(self) -> bool:
        """Whether this rank tells MLTCP where iterations end (once per job and kernel)."""
        if not self.mltcp_job:
            return False
        return self.rank == 0 if self.mltcp_marker is None else self.mltcp_marker

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        """Read a spec written by :meth:`to_json`; an unknown or missing field is an
        :class:`~cassini.errors.InputError` naming it."""
        obj = dict(schema.require_object(json.loads(text), "worker spec"))
        names = [f.name for f in fields(cls)]
        required = names[:5]
        schema.check_fields(obj, "", required, names[5:])
        if "addrs" in obj:
            obj["addrs"] = tuple(schema.array(obj["addrs"], "addrs"))
        if "partners" in obj:
            obj["partners"] = tuple(schema.array(obj["partners"], "partners"))
        return cls(**obj)

    @classmethod
    def load(cls, path: str | Path) -> WorkerSpec:
        return cls.from_json(Path(path).read_text())

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())


if __name__ == "__main__":
    from testbed import not_a_command

    not_a_command("testbed.workerspec")
