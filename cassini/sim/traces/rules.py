"""The rules that make a trace row a job: which profile it trains (:class:`ModelRule`, the
seeded rule) and how many iterations a recorded run time is (:func:`iterations_for`)."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Mapping, Sequence

from cassini.profile import JobProfile, match_model, model_key, model_keys
from cassini.sim.jobspec import JobSpec

#: Iterations drawn for a job whose trace records neither a duration nor a count
#: (Pollux): uniform in this inclusive range, as the CASSINI paper's workloads.
DEFAULT_ITERATIONS = (200, 1000)


def iterations_for(duration_s: float, profile: JobProfile) -> int:
    """Whole iterations that take ``duration_s`` at the profile's dedicated pace (>= 1):
    the profile as the job runs it (``SimConfig.read_workload`` hands the readers the
    library on the cluster's server links, :func:`cassini.sim.workload.library_on_cluster`).
    The job keeps ``duration_s`` as its :attr:`JobSpec.run_s`."""
    return max(1, math.ceil(duration_s / profile.iteration_time_s - 1e-9))


DURATION_NOTE = (
    "iterations: the recorded run time (s) over the chosen profile's dedicated iteration "
    "time, rounded up: the trace's run time, which included whatever contention that "
    "cluster had, is taken as the run time on a dedicated network"
)


class ModelRule:
    """Which library profile a job trains.

    A name the trace gives is matched to a profile id ignoring case and punctuation
    (``GPT-2`` -> ``gpt2``; :func:`cassini.profile.match_model`, as every model name
    is), then through the reader's alias table.  Otherwise — no name,
    or one the library lacks — the **seeded rule**: the library's ids sorted, index
    ``sha256("<seed>:<job id>") mod count``; the same job gets the same model for the same
    seed and library, whatever else is in the trace."""

    def __init__(
        self,
        library: Mapping[str, JobProfile],
        seed: int,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self.library = library
        self.seed = seed
        self.ids = sorted(library)
        self.by_key = model_keys(self.ids)
        self.aliases = {model_key(k): v for k, v in (aliases or {}).items() if v in library}
        #: job id -> (model, how: named, alias or seeded, the unmatched name) of each choice
        self.chosen: dict[str, list[tuple[str, str, str | None]]] = {}

    def choose(self, job_id: str, name: str | None = None) -> str:
        model, how, unmatched = self._choose(job_id, name)
        self.chosen.setdefault(job_id, []).append((model, how, unmatched))
        return model

    def _choose(self, job_id: str, name: str | None) -> tuple[str, str, str | None]:
        if name:
            found = match_model(name, self.library, self.by_key)
            if found is not None:
                return found, "named", None
            key = model_key(name)
            if key in self.aliases:
                return self.aliases[key], "alias", None
        digest = hashlib.sha256(f"{self.seed}:{job_id}".encode()).digest()
        return self.ids[int.from_bytes(digest[:8], "big") % len(self.ids)], "seeded", name or None

    def draw(self, job_id: str, low_high: tuple[int, int] = DEFAULT_ITERATIONS) -> int:
        """Iterations for a job whose trace gives none: uniform in ``low_high`` from the
        same seeded hash (salted)."""
        lo, hi = low_high
        digest = hashlib.sha256(f"{self.seed}:{job_id}:iterations".encode()).digest()
        return lo + int.from_bytes(digest[:8], "big") % (hi - lo + 1)

    def notes(self, jobs: Sequence[JobSpec] | None = None) -> list[str]:
        """How many ``jobs`` got which rule, and the names the library lacks (a reader
        passes this to :func:`~cassini.sim.traces.common.finish`, which calls it with the
        jobs it keeps: a rejected row is no job of the run).  Without ``jobs`` (a test's
        look at the rule), every choice so far."""
        if jobs is None:
            choices = [c for made in self.chosen.values() for c in made]
        else:  # the choice made for the row kept: the one that gave its model
            choices = [self._choice_of(j) for j in jobs if j.job_id in self.chosen]
        used = Counter(how for _, how, _ in choices)
        unmatched = Counter(name for _, _, name in choices if name)
        out = []
        if used["named"] or used["alias"]:
            out.append(
                f"model: {used['named']} jobs by the trace's model name, "
                f"{used['alias']} through the reader's alias table"
            )
        if used["seeded"]:
            out.append(
                f"model: {used['seeded']} jobs by the seeded rule (library ids sorted, "
                f"index sha256('{self.seed}:<job id>') mod {len(self.ids)}; "
                f"library: {', '.join(self.ids)})"
            )
        if unmatched:
            names = ", ".join(f"{n} ({c})" for n, c in unmatched.most_common(8))
            out.append(f"model names not in the library (seeded rule used): {names}")
        return out

    def _choice_of(self, job: JobSpec) -> tuple[str, str, str | None]:
        made = self.chosen[job.job_id]  # more than one when rows repeat the id
        return next((c for c in made if c[0] == job.model), made[0])
