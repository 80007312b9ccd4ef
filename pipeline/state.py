"""The state of one ingestion job as it moves from phase to phase.

Each phase reads what earlier phases wrote and returns a copy with its own output added; a
phase whose name is already in ``done`` is skipped, so a phase re-run after a crash is a no-op.
Between Celery tasks the state sits in Redis under the job id (messages on the broker carry the
id only); the in-process driver keeps it in memory.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipeline.models import AddRequest, ContextMessage, ExistingMemory, Fact


class Phase(StrEnum):
    CONTEXT = "context"
    RETRIEVE = "retrieve"
    EXTRACT = "extract"
    EMBED = "embed"
    LEMMATIZE = "lemmatize"
    DEDUP = "dedup"
    PERSIST = "persist"
    LINK = "link"
    FINALIZE = "finalize"


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"


class ItemError(BaseModel):
    """Something that went wrong with one item, reported in the job (never dropped silently)."""

    model_config = ConfigDict(frozen=True)

    phase: Phase
    reason: str
    text: str | None = None
    raw: str | None = None


class StoredMemory(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    event: str = "ADD"
    speaker: str | None = None


class JobState(BaseModel):
    """Everything a job knows, phase by phase. Lists under "facts" are aligned by index."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    request: AddRequest
    received_at: datetime
    batch_id: str | None = None
    attempts: int = 0  # how many times the job was replayed
    backfill: bool = False  # runs on the backfill queue (and so does its replay)
    done: tuple[Phase, ...] = ()
    timings_ms: dict[str, float] = Field(default_factory=dict)
    context: list[ContextMessage] = Field(default_factory=list)
    existing: list[ExistingMemory] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list)
    embeddings: list[list[float] | None] = Field(default_factory=list)
    lemmas: list[str] = Field(default_factory=list)
    hashes: list[str] = Field(default_factory=list)
    keep: list[bool] = Field(default_factory=list)
    stored: list[StoredMemory] = Field(default_factory=list)
    entity_ids: list[str] = Field(default_factory=list)
    errors: list[ItemError] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)

    def with_(self, **changes: Any) -> JobState:
        """A copy with ``changes`` applied (field names of this model)."""
        unknown = set(changes) - set(type(self).model_fields)
        if unknown:
            raise TypeError(f"JobState has no field(s) {sorted(unknown)}")
        return self.model_copy(update=changes)

    def completed(self, phase: Phase, elapsed_ms: float) -> JobState:
        """A copy with ``phase`` marked done and its duration recorded."""
        timings = {**self.timings_ms, phase.value: round(elapsed_ms, 2)}
        return self.model_copy(update={"done": (*self.done, phase), "timings_ms": timings})

    def is_done(self, phase: Phase) -> bool:
        return phase in self.done
