"""The state of one ingestion job as it moves from phase to phase.

Each phase reads what earlier phases wrote and returns a copy with its own output added; a
phase whose name is already in ``done`` is skipped, so a phase re-run after a crash is a no-op.
Between Celery tasks the state sits in Redis under the job id (messages on the broker carry the
ids of a batch only); the in-process driver keeps it in memory.

Vectors are the bulk of a state once facts are embedded. In JSON they travel as base64 of their
float32 bytes, not as lists of decimal floats: 3.4 times smaller for ten facts, at the same
encoding cost (``ops/bench/state_codec.py`` measures both). float32 loses nothing: the models
produce float32, and Elasticsearch indexes float32.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from pipeline.domain.jobs import JobStatus, StoredMemory
from pipeline.domain.models import AddRequest, ContextMessage, ExistingMemory, Fact

# JobStatus and StoredMemory live in pipeline.domain.jobs, and stay importable from here
__all__ = [
    "ItemError",
    "JobState",
    "JobStatus",
    "Phase",
    "PlannedEntity",
    "StoredMemory",
    "Vectors",
    "decode_vectors",
    "encode_vectors",
    "run_log_fields",
]


def encode_vectors(vectors: list[list[float] | None]) -> list[str | None]:
    """Each vector as base64 of its little-endian float32 bytes (None stays None)."""
    return [
        None if v is None else base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
        for v in vectors
    ]


def decode_vectors(value: Any) -> Any:
    """The inverse of ``encode_vectors``; lists of floats (as built in process) pass through."""
    if not isinstance(value, list):
        return value
    return [
        np.frombuffer(base64.b64decode(v), dtype="<f4").tolist() if isinstance(v, str) else v
        for v in value
    ]


Vectors = Annotated[
    list[list[float] | None],
    BeforeValidator(decode_vectors),
    PlainSerializer(encode_vectors, when_used="json"),
]


class Phase(StrEnum):
    CONTEXT = "context"
    RETRIEVE = "retrieve"
    EXTRACT = "extract"
    EMBED = "embed"
    LEMMATIZE = "lemmatize"
    DEDUP = "dedup"
    LINK = "link"
    PERSIST = "persist"
    FINALIZE = "finalize"


class ItemError(BaseModel):
    """Something that went wrong with one item, reported in the job (never dropped silently)."""

    model_config = ConfigDict(frozen=True)

    phase: Phase
    reason: str
    text: str | None = None
    raw: str | None = None


class PlannedEntity(BaseModel):
    """An entity named in the job's kept facts, and the entity of the scope it is linked to:
    its own (``entity_id`` of its name) or a similar one it merges into."""

    model_config = ConfigDict(frozen=True)

    name: str  # normalized text
    text: str
    type: str
    target: str
    facts: list[int]  # the indices of the facts that mention it


class JobState(BaseModel):
    """Everything a job knows, phase by phase. Lists under "facts" are aligned by index."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    request: AddRequest
    received_at: datetime
    batch_id: str | None = None
    attempts: int = 0  # how many times the job was replayed
    backfill: bool = False  # runs on the backfill queue (and so does its replay)
    # accepted while Elasticsearch was down: in its session's line, but not started until its
    # record is written (``workers.intake.record_held``)
    unrecorded: bool = False
    request_id: str | None = None  # the API request that queued the job (X-Request-ID)
    run: str | None = None  # the worker batch that runs the job now (its phase tasks' batch id)
    batch_size: int = 1  # how many jobs that batch started with
    retries: int = 0  # times the job was sent on alone to retry a phase
    done: tuple[Phase, ...] = ()
    timings_ms: dict[str, float] = Field(default_factory=dict)
    context: list[ContextMessage] = Field(default_factory=list)
    existing: list[ExistingMemory] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list)
    embeddings: Vectors = Field(default_factory=list)
    lemmas: list[str] = Field(default_factory=list)
    hashes: list[str] = Field(default_factory=list)
    keep: list[bool] = Field(default_factory=list)
    entities: list[PlannedEntity] = Field(default_factory=list)
    entity_vectors: Vectors = Field(default_factory=list)  # aligned with entities
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

    def log_fields(self) -> dict[str, str]:
        """What names the job on a log line (``pipeline.logs``): its id, tenant and, when an
        API request queued it, that request's id."""
        fields = {"job_id": self.job_id, "tenant": self.request.scope.tenant}
        if self.request_id is not None:
            fields["request_id"] = self.request_id
        return fields


def run_log_fields(states: Sequence[JobState]) -> dict[str, str]:
    """The log fields of a run of ``states``: its job's when it is one job (the usual run
    under light load, so every line of its phases names it), none for a batch of several
    (their lines about one job name it themselves)."""
    return states[0].log_fields() if len(states) == 1 else {}
