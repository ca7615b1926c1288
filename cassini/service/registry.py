"""The service's registry: the cluster (from ``--cluster``), the running jobs (those of
the cluster file and those registered over HTTP) and the time-shifts set by PUT.  What
came over HTTP is written through to the :class:`~cassini.service.store.Store` (one
transaction per write, committed before the answer) and read back from it at start.

The service never refuses to start because of rows it wrote itself: a registered job it
can no longer use (a node of it left the cluster, or its row, or the row of its explicit
time-shift, no longer reads) is kept, listed by :meth:`Registry.unusable`, left out of
every computation and answered ``shift: false`` with the reason."""

from __future__ import annotations

from collections.abc import Mapping

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
        stored = store.jobs()
        self.api_jobs: dict[str, RunningJob] = {j.job_id: j for j in stored.jobs}
        #: rows kept in the state file that no longer read: id -> (why, iteration time s)
        self.unreadable: dict[str, tuple[str, float | None]] = dict(stored.unreadable)
        #: jobs the cluster source left out (``--kube``: pods in conflict): id -> why
        self.file_left_out: dict[str, str] = {}
        shifts = store.shifts()
        self.explicit: dict[str, JobShift] = {s.job_id: s for s in shifts.shifts}
        #: explicit shifts kept in the state file that no longer read: job id -> why (the
        #: job is not used until a PUT, a new registration or a DELETE replaces the row)
        self.unreadable_shifts: dict[str, str] = dict(shifts.unreadable)
        self._version = 0
        self._state: State | None = None
        self._unusable: dict[str, str] | None = None

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

    def stale_reason(self, job: RunningJob) -> str | None:
        """Why a registered job cannot be placed on the current cluster (a node of it is
        no longer there), or None."""
        gone = [n for n in job.nodes if n not in self.cluster.nodes]
        if not gone:
            return None
        return f"node{'s' if len(gone) > 1 else ''} {', '.join(gone)} no longer in the cluster"

    def unusable(self) -> dict[str, str]:
        """Registered jobs kept but not used: id -> why (their rows stay in the file)."""
        if self._unusable is None:
            out = {jid: why for jid, (why, _) in self.unreadable.items()}
            for jid, why in self.file_left_out.items():
                if jid not in self.api_jobs:  # registered over HTTP: that one is used
                    out.setdefault(jid, why)
            jobs = self.jobs()
            for jid, why in self.unreadable_shifts.items():
                if jid in jobs:
                    out.setdefault(jid, why)
            for jid, job in self.api_jobs.items():
                why = self.stale_reason(job)
                if why is not None:
                    out[jid] = why
            self._unusable = dict(sorted(out.items()))
        return self._unusable

    def state(self) -> State:
        """The snapshot the workers compute on: every usable running job."""
        if self._state is None:
            self._version += 1
            # a registered job a node of which left is not used; a cluster file's (or the
            # pods') jobs are the cluster's own word: their remaining nodes still count
            unusable = self.unusable()
            jobs = {j: job for j, job in self.jobs().items() if j not in unusable}
            self._state = State(self._version, self.cluster, jobs)
        return self._state

    def _changed(self) -> None:
        self._state = None
        self._unusable = None

    def put(self, job: RunningJob) -> bool:
        """Register (or replace) a job; True if it is new.  An explicit shift goes."""
        jobs = self.jobs()
        new = job.job_id not in jobs
        if new and len(jobs) >= self.max_jobs:
            over = len(jobs) - self.max_jobs + 1
            raise TooManyJobs(
                f"the registry holds {len(jobs)} jobs, the limit is {self.max_jobs} "
                f"(--max-jobs); remove {'one' if over == 1 else over} first", "id"
            )
        self.store.put_job(job)
        self.api_jobs[job.job_id] = job
        self.unreadable.pop(job.job_id, None)
        self.explicit.pop(job.job_id, None)
        self.unreadable_shifts.pop(job.job_id, None)
        self._changed()
        return new

    def delete(self, job_id: str) -> RunningJob | None:
        """Remove a job (None: it was an unreadable row, now removed from the file)."""
        job = self.jobs().get(job_id)
        if job is None and job_id in self.unreadable:
            self.store.delete_job(job_id)
            del self.unreadable[job_id]
            self.explicit.pop(job_id, None)
            self.unreadable_shifts.pop(job_id, None)
            self._changed()
            return None
        if job is None:
            raise NotFound(f"no running job {job_id!r}", "job_id")
        self.store.delete_job(job_id)
        if self.api_jobs.pop(job_id, None) is None:
            self.file_jobs.pop(job_id, None)
        self.explicit.pop(job_id, None)
        self.unreadable_shifts.pop(job_id, None)
        self._changed()
        return job

    def set_shift(self, shift: JobShift) -> None:
        """Set a job's time-shift (or release) explicitly, kept until the job is removed
        or registered again."""
        self.job(shift.job_id)
        self.store.set_shift(shift)
        self.explicit[shift.job_id] = shift
        if self.unreadable_shifts.pop(shift.job_id, None) is not None:
            self._changed()  # its row reads again: the job is used again

    def replace_file(
        self,
        cluster: ClusterNetwork,
        file_jobs: list[RunningJob],
        left_out: Mapping[str, str] | None = None,
    ) -> None:
        """The cluster and its own jobs, new (the cluster file, or ``--kube``'s model);
        ``left_out``: the source's jobs it could not give (id -> why), listed unusable."""
        self.cluster = cluster
        self.file_jobs = {j.job_id: j for j in file_jobs}
        self.file_left_out = dict(left_out or {})
        keep = set(self.jobs()) | set(self.unreadable)
        if any(j not in keep for j in [*self.explicit, *self.unreadable_shifts]):
            self.store.forget_shifts(keep)
        self.explicit = {j: v for j, v in self.explicit.items() if j in keep}
        self.unreadable_shifts = {
            j: why for j, why in self.unreadable_shifts.items() if j in keep
        }
        self._changed()
