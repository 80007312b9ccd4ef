"""Job records: what a caller can read about a job at any time, and how a state becomes one."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from pipeline.state import JobState


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"


class StoredMemory(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    event: str = "ADD"
    speaker: str | None = None


class JobRecord(BaseModel):
    """The readable record of a job, kept in the ``jobs`` index."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    tenant: str
    status: str
    phase: str | None = None
    session_key: str | None = None
    batch_id: str | None = None
    attempts: int = 0
    backfill: bool = False
    counts: dict[str, int] = Field(default_factory=dict)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    reason: str | None = None
    errors: list[dict[str, Any]] = Field(default_factory=list)
    results: list[dict[str, Any]] = Field(default_factory=list)
    request: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None


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
