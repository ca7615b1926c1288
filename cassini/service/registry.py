"""The service's registry: the cluster (from ``--cluster``), the running jobs (those of
the cluster file and those registered over HTTP) and the time-shifts set by PUT.  What
came over HTTP is written through to the :class:`~cassini.service.store.Store` (one
transaction per write, committed before the answer) and read back from it at start."""

from __future__ import annotations

from cassini.service.cluster import ClusterNetwork, RunningJob
from cassini.service.errors import NotFound, TooManyJobs
from cassini.service.scoring import State
from cassini.service.shifts import JobShift
from cassini.service.store import Store


class Registry:
    """The cluster and its running jobs: those of the cluster file and those registered
    over HTTP (kept across reloads and restarts; an id in both: the HTTP one), with the
    time-shifts set by PUT.  :meth:`state` is the snapshot the workers compute on.  At
    most ``max_jobs`` running jobs."""

    def __init__(
        self,
        cluster: ClusterNetwork,
        file_jobs: list[RunningJob],
        store: Store,
        max_jobs: int = 10_000,
    ) -> None:
        self.cluster = cluster
        self.file_jobs = {j.job_id: j for j in file_jobs}
        self.store = store
        self.max_jobs = max_jobs
        self.api_jobs: dict[str, RunningJob] = {j.job_id: j for j in store.jobs()}
        self.explicit: dict[str, JobShift] = {s.job_id: s for s in store.shifts()}
        self._version = 0
        self._state: State | None = None

    @property
    def epoch_s(self) -> float:
        """UNIX seconds every job's slots count from: the cluster file's ``epoch_s``, else
        the one the state file keeps (chosen when it was made)."""
        return self.cluster.epoch_s if self.cluster.epoch_s is not None else self.store.epoch_s

    def jobs(self) -> dict[str, RunningJob]:
        return self.file_jobs | self.api_jobs

    def job(self, job_id: str) -> RunningJob:
        """The running job ``job_id``; :class:`NotFound` if there is none."""
        job = self.jobs().get(job_id)
        if job is None:
            raise NotFound(f"no running job {job_id!r} (register it with POST /v1/jobs)", "job_id")
        return job

    def state(self) -> State:
        if self._state is None:
            self._version += 1
            self._state = State(self._version, self.cluster, self.jobs())
        return self._state

    def _changed(self) -> None:
        self._state = None

    def put(self, job: RunningJob) -> bool:
        """Register (or replace) a job; True if it is new.  An explicit shift goes."""
        jobs = self.jobs()
        new = job.job_id not in jobs
        if new and len(jobs) >= self.max_jobs:
            raise TooManyJobs(
                f"the registry holds {len(jobs)} jobs, the limit (--max-jobs); remove one "
                "first", "id"
            )
        self.store.put_job(job)
        self.api_jobs[job.job_id] = job
        self.explicit.pop(job.job_id, None)
        self._changed()
        return new

    def delete(self, job_id: str) -> RunningJob:
        job = self.jobs().get(job_id)
        if job is None:
            raise NotFound(f"no running job {job_id!r}", "job_id")
        self.store.delete_job(job_id)
        if self.api_jobs.pop(job_id, None) is None:
            self.file_jobs.pop(job_id, None)
        self.explicit.pop(job_id, None)
        self._changed()
        return job

    def set_shift(self, shift: JobShift) -> None:
        """Set a job's time-shift (or release) explicitly, kept until the job is removed
        or registered again."""
        self.job(shift.job_id)
        self.store.set_shift(shift)
        self.explicit[shift.job_id] = shift

    def replace_file(self, cluster: ClusterNetwork, file_jobs: list[RunningJob]) -> None:
        self.cluster = cluster
        self.file_jobs = {j.job_id: j for j in file_jobs}
        keep = set(self.jobs())
        if any(j not in keep for j in self.explicit):
            self.store.forget_shifts(keep)
        self.explicit = {j: v for j, v in self.explicit.items() if j in keep}
        self._changed()
