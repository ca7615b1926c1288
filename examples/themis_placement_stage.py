"""A toy Themis-style scheduler whose placement stage is CASSINI.

Themis (NSDI 2020) allocates GPUs to the jobs that are furthest behind their fair share
(highest *finish-time fairness* rho = time in the shared cluster / time alone) and then
places them, preferring the fewest servers and one rack.  Several placements are often
equally good for GPUs but not for the network: the jobs sharing a server's NIC or a
rack's uplink may collide in their all-reduce phases or interleave.  Here the placement
stage hands the candidate server sets to :func:`cassini.plugin.choose_placement`, which
picks the one whose jobs interleave best, says which jobs are predicted to gain from
being held to a time-shift (``choice.shift``) and to which period
(``choice.agent_period_s``); the others run free.

Cluster: two racks of two 4-GPU servers; each server's NIC and each rack's uplink is a
25 Gbit/s link.  Run:  .venv/bin/python examples/themis_placement_stage.py
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from cassini.advisor import Link, held_time_shifts
from cassini.plugin import PlacementChoice, choose_placement
from cassini.profile import JobProfile, Phase

GBPS = 1e9
GPUS_PER_SERVER = 4
RACKS = {"rack0": ("s0", "s1"), "rack1": ("s2", "s3")}
RACK_OF = {server: rack for rack, servers in RACKS.items() for server in servers}
#: link id -> capacity in bits/s: one NIC per server, one uplink per rack
LINKS = {server: 25 * GBPS for server in RACK_OF} | {f"{rack}-up": 25 * GBPS for rack in RACKS}


def links_crossed(servers: dict[str, int]) -> list[str]:
    """Links a data-parallel job's all-reduce crosses: the NIC of each of its servers
    when it spans several, and the rack uplinks when it spans racks."""
    if len(servers) < 2:
        return []
    racks = sorted({RACK_OF[s] for s in servers})
    return sorted(servers) + ([f"{rack}-up" for rack in racks] if len(racks) > 1 else [])


@dataclass
class Job:
    job_id: str
    gpus: int
    profile: JobProfile
    ideal_s: float  # run time alone on dedicated GPUs
    waited_s: float = 0.0

    @property
    def rho(self) -> float:
        """Finish-time fairness if it started now (Themis's priority: highest first)."""
        return (self.waited_s + self.ideal_s) / self.ideal_s


@dataclass(frozen=True)
class Decision:
    job_id: str
    servers: dict[str, int]
    choice: PlacementChoice
    candidates: tuple[str, ...]
    #: job id -> (time-shift s, period s) for each job the agents hold; the rest run free
    agents: dict[str, tuple[float, float]]


class ThemisWithCassini:
    """Allocation as Themis (most-behind job first, consolidated placements), placement
    by CASSINI among the consolidated candidates."""

    def __init__(self, running: dict[str, tuple[JobProfile, dict[str, int]]]) -> None:
        self.running = dict(running)  # job id -> (profile, server -> GPUs)

    def allocate(self, queue: list[Job], free_gpus: dict[str, int]) -> list[Decision]:
        decisions = []
        for job in sorted(queue, key=lambda j: -j.rho):
            candidates = self.candidates(job.gpus, free_gpus)
            if not candidates:
                continue  # waits for the next round
            choice = self.place(job, candidates)
            servers = candidates[choice.index]
            for server, n in servers.items():
                free_gpus[server] -= n
            self.running[job.job_id] = (job.profile, servers)
            names = tuple(_name(c) for c in candidates)
            agents = self.agents(choice)
            decisions.append(Decision(job.job_id, servers, choice, names, agents))
        return decisions

    def agents(self, choice: PlacementChoice) -> dict[str, tuple[float, float]]:
        """(time-shift, period) in seconds for each job the choice holds: a period longer
        than the job's iteration time gets its shifts solved on the periods."""
        periods = {j: p for j, p in choice.agent_period_s.items() if choice.shift[j]}
        shifts = choice.time_shifts_s
        profiles = {j: profile for j, (profile, _) in self.running.items()}
        if any(p > profiles[j].iteration_time_s for j, p in periods.items()):
            links = [Link(k, v) for k, v in LINKS.items()]
            paths = {j: links_crossed(servers) for j, (_, servers) in self.running.items()}
            shifts = held_time_shifts(links, paths, profiles, periods)
        return {j: (shifts[j], p) for j, p in sorted(periods.items())}

    def candidates(self, gpus: int, free_gpus: dict[str, int]) -> list[dict[str, int]]:
        """Server sets that fit ``gpus`` on the fewest servers, one rack first (the
        scheduler's order of preference), each server filled in turn."""
        servers = sorted(s for s, n in free_gpus.items() if n > 0)
        for k in range(1, len(servers) + 1):
            found = []
            for combo in combinations(servers, k):
                if sum(free_gpus[s] for s in combo) < gpus:
                    continue
                take, left = {}, gpus
                for s in combo:
                    take[s] = min(free_gpus[s], left)
                    left -= take[s]
                if all(take.values()):
                    found.append(take)
            if found:
                return sorted(found, key=lambda c: len({RACK_OF[s] for s in c}))
        return []

    def place(self, job: Job, candidates: list[dict[str, int]]) -> PlacementChoice:
        """The placement stage: CASSINI picks among the candidates."""
        jobs = {j: profile for j, (profile, _) in self.running.items()}
        jobs[job.job_id] = job.profile
        running_paths = {j: links_crossed(servers) for j, (_, servers) in self.running.items()}
        paths = [running_paths | {job.job_id: links_crossed(c)} for c in candidates]
        return choose_placement(jobs, LINKS, paths, candidate_ids=[_name(c) for c in candidates])


def _name(servers: dict[str, int]) -> str:
    return "+".join(f"{s}:{n}" for s, n in servers.items())


def profile(job_id: str, iteration_s: float, comm_s: float, rate_gbps: float) -> JobProfile:
    """A job computing, then all-reducing for ``comm_s`` at the end of each iteration."""
    return JobProfile(job_id, iteration_s, [Phase(iteration_s - comm_s, comm_s, rate_gbps * GBPS)])


def main() -> None:
    # already running: VGG-16 on rack 0, ResNet-50 on rack 1, two GPUs on each server
    scheduler = ThemisWithCassini(
        {
            "vgg16": (profile("vgg16", 0.3, 0.2, 20), {"s0": 2, "s1": 2}),
            "resnet50": (profile("resnet50", 0.2, 0.08, 20), {"s2": 2, "s3": 2}),
        }
    )
    free = {"s0": 2, "s1": 2, "s2": 2, "s3": 2}
    queue = [
        Job("bert", 4, profile("bert", 0.2, 0.1, 20), ideal_s=3600, waited_s=1800),
        Job("gpt2", 4, profile("gpt2", 0.25, 0.1, 20), ideal_s=7200, waited_s=600),
    ]
    print("links: " + ", ".join(f"{k} {v / GBPS:g} Gb/s" for k, v in LINKS.items()))
    for d in scheduler.allocate(queue, free):
        c = d.choice
        print(f"\n{d.job_id}: {len(d.candidates)} candidate(s) in the scheduler's order")
        scores = {r.candidate_id: r for r in c.ranked}
        for i, name in enumerate(d.candidates):
            r = scores[name]
            score = f"{r.score:.3f}" if r.score is not None else "-"
            mark = "  <- chosen" if i == c.index else ""
            print(f"  [{i}] {name:<12} {r.status:<8} score {score}{mark}")
        how = "CASSINI's choice" if c.accepted else "fallback: all rejected, first candidate"
        print(f"  placed on {_name(d.servers)} ({how})")
        held = [f"{j} {t * 1e3:.0f} ms (period {p * 1e3:.0f} ms)" for j, (t, p) in d.agents.items()]
        print("  time-shifts for the agents: " + (", ".join(held) or "none, all run free"))
        free_running = sorted(j for j, s in c.shift.items() if not s)
        if free_running:
            print(f"  run free (no predicted gain, or no shared link): {', '.join(free_running)}")
    print(f"\nfree GPUs after the round: {free}")


if __name__ == "__main__":
    main()
