"""Job records in memory (``repositories.jobs``): a create conflicts as in Elasticsearch."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.store.memory.tables import Tables


class JobsInMemory(Tables):
    def save_job(self, record: JobRecord) -> None:
        with self._lock:
            self.jobs[record.job_id] = record

    def create_job(self, record: JobRecord) -> JobRecord | None:
        """``record`` unless the job has one already, which is returned (None: written)."""
        with self._lock:
            existing = self.jobs.get(record.job_id)
            if existing is None:
                self.jobs[record.job_id] = record
            return existing

    def parked_jobs(self, limit: int, fresh: bool = False) -> list[JobRecord]:
        """``queued`` records marked ``parked``, oldest first (``fresh`` changes nothing:
        every write is seen at once here)."""
        with self._lock:
            parked = [r for r in self.jobs.values() if r.parked and r.status == JobStatus.QUEUED]
        return sorted(parked, key=lambda r: (r.created_at, r.job_id))[:limit]

    def unpark_jobs(self, job_ids: Sequence[str]) -> None:
        with self._lock:
            for job_id in job_ids:
                if job_id in self.jobs:
                    self.jobs[job_id] = self.jobs[job_id].model_copy(update={"parked": False})

    def save_jobs(self, records: Sequence[JobRecord]) -> None:
        for record in records:
            self.save_job(record)

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._lock:
            return self.jobs.get(job_id)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord | None]:
        with self._lock:
            return {job_id: self.jobs.get(job_id) for job_id in job_ids}
