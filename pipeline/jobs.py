"""Job records: what a caller can read about a job at any time, and how a state becomes one."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pipeline.state import JobState, JobStatus
from pipeline.store.protocol import JobRecord


def job_record(
    state: JobState,
    status: JobStatus,
    now: datetime,
    *,
    phase: str | None = None,
    reason: str | None = None,
) -> JobRecord:
    """The record of ``state`` in ``status``; finished statuses carry ``finished_at``."""
    finished = status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.DEAD)
    return JobRecord(
        job_id=state.job_id,
        tenant=state.request.scope.tenant,
        status=status.value,
        phase=phase,
        session_key=state.request.scope.key,
        batch_id=state.batch_id,
        attempts=state.attempts,
        backfill=state.backfill,
        counts={**state.counts, "batch_size": state.batch_size},
        timings_ms=state.timings_ms,
        reason=reason,
        errors=[error.model_dump(mode="json", exclude_none=True) for error in state.errors],
        results=[memory.model_dump(mode="json") for memory in state.stored],
        request=request_summary(state),
        created_at=state.received_at,
        updated_at=now,
        finished_at=now if finished else None,
    )


def request_summary(state: JobState) -> dict[str, Any]:
    """The request as stored in the record, so a dead job can be replayed from it."""
    return state.request.model_dump(mode="json", exclude_none=True)
