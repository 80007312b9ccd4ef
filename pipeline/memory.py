"""``Memory``: the in-process facade. It runs the same phase functions as the workers,
synchronously, over whatever ``Deps`` it is given (the SDK's local mode, and unit tests)."""

from __future__ import annotations

from typing import Any

from pipeline.deps import Deps
from pipeline.errors import MemqError, RetriesExhaustedError, TransientError
from pipeline.jobs import JobRecord, JobStatus, job_record, public_results
from pipeline.models import AddRequest
from pipeline.phases import PHASES, run_phase
from pipeline.state import JobState


class Memory:
    """add() a conversation and get its memories back in the same call."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    def add(self, request: AddRequest, job_id: str | None = None) -> dict[str, Any]:
        """Run every phase for ``request``. Returns ``{"job_id", "results": [{"id", "memory",
        "event"}]}``. The job is recorded either way; a failure re-raises the ``MemqError``."""
        state = JobState(
            job_id=job_id or request.job_id(), request=request, received_at=self.deps.clock()
        )
        existing = self.deps.store.get_job(state.job_id)
        if existing is not None and existing.status == JobStatus.SUCCEEDED:
            return result_of(existing)
        state = self._run(state)
        return {"job_id": state.job_id, "results": public_results(state.stored)}

    def _run(self, state: JobState) -> JobState:
        for spec in PHASES:
            try:
                state = run_phase(spec, state, self.deps)
            except MemqError as exc:
                dead = isinstance(exc, TransientError | RetriesExhaustedError)
                status = JobStatus.DEAD if dead else JobStatus.FAILED
                self.deps.store.save_job(
                    job_record(
                        state, status, self.deps.clock(), phase=spec.phase.value, reason=exc.reason
                    )
                )
                raise
        return state

    def job(self, job_id: str) -> JobRecord | None:
        return self.deps.store.get_job(job_id)


def result_of(record: JobRecord) -> dict[str, Any]:
    return {"job_id": record.job_id, "results": public_results(record.results)}
