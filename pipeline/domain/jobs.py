"""The job as a caller sees it: its statuses, its record, and its results in the public shape.

Everything that reads or writes a job's status uses ``JobStatus`` and the sets below; the
record's results are the ``StoredMemory`` items the job stored, shown to callers by
``public_results`` as ``{"id", "memory", "event"}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from pipeline.domain.state import JobState


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"


TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.DEAD})
"""A job in one of these has ended: nothing runs it any more (a dead one may be replayed)."""

ACTIVE_STATUSES = frozenset({JobStatus.QUEUED, JobStatus.RUNNING})
"""A job in one of these is waiting for a worker or held by one."""


class ReplacedMemory(BaseModel):
    """A memory that a job's new memory replaced (``pipeline.domain.validity``): its id and text."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str


class StoredMemory(BaseModel):
    """A memory a job stored: its id, its text, what the job did (``ADD``), and the memories
    it made untrue (``replaces``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    event: str = "ADD"
    speaker: str | None = None
    replaces: tuple[ReplacedMemory, ...] = ()


class JobRecord(BaseModel):
    """The readable record of a job, kept in the ``jobs`` index."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    tenant: str
    status: JobStatus
    phase: str | None = None
    session_key: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    batch_id: str | None = None
    attempts: int = 0
    backfill: bool = False
    # accepted while Redis was down: in no session line yet (``workers.intake.drain_parked``)
    parked: bool = False
    request_id: str | None = None  # the API request that queued the job (X-Request-ID)
    counts: dict[str, int] = Field(default_factory=dict)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    reason: str | None = None
    errors: list[dict[str, Any]] = Field(default_factory=list)
    results: list[StoredMemory] = Field(default_factory=list)
    request: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None

    @property
    def ended(self) -> bool:
        """Whether the job is in a terminal status."""
        return self.status in TERMINAL_STATUSES


def public_results(memories: Sequence[StoredMemory]) -> list[dict[str, Any]]:
    """A job's stored memories as memq's API shows them: ``{"id", "memory", "event"}``, and
    ``"replaces": [{"id", "memory"}]`` for one that made stored memories untrue."""
    return [
        {"id": m.id, "memory": m.text, "event": m.event}
        | ({"replaces": [{"id": r.id, "memory": r.text} for r in m.replaces]} if m.replaces else {})
        for m in memories
    ]


def mem0_results(memories: Sequence[StoredMemory]) -> list[dict[str, Any]]:
    """A job's stored memories as mem0's clients read an add: a memory that replaced another
    is an ``UPDATE`` whose ``previous_memory`` is the text it replaced (mem0 edits the old
    memory in place; memq keeps both, and the id is the memory that is true now)."""
    return [
        {"id": m.id, "memory": m.text, "event": "UPDATE", "previous_memory": m.replaces[0].text}
        if m.replaces
        else {"id": m.id, "memory": m.text, "event": m.event}
        for m in memories
    ]


def job_record(
    state: JobState,
    status: JobStatus,
    now: datetime,
    *,
    phase: str | None = None,
    reason: str | None = None,
) -> JobRecord:
    """The record of ``state`` in ``status``; finished statuses carry ``finished_at``."""
    return JobRecord(
        job_id=state.job_id,
        tenant=state.request.scope.tenant,
        status=status,
        phase=phase,
        session_key=state.request.scope.key,
        user_id=state.request.scope.user_id,
        agent_id=state.request.scope.agent_id,
        run_id=state.request.scope.run_id,
        batch_id=state.batch_id,
        attempts=state.attempts,
        backfill=state.backfill,
        request_id=state.request_id,
        counts={**state.counts, "batch_size": state.batch_size},
        timings_ms=state.timings_ms,
        reason=reason,
        errors=[error.model_dump(mode="json", exclude_none=True) for error in state.errors],
        results=list(state.stored),
        request=request_summary(state),
        created_at=state.received_at,
        updated_at=now,
        finished_at=now if status in TERMINAL_STATUSES else None,
    )


def request_summary(state: JobState) -> dict[str, Any]:
    """The request as stored in the record, so a dead job can be replayed from it."""
    return state.request.model_dump(mode="json", exclude_none=True)
