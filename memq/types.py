"""The SDK's answers: pydantic models of what memq's HTTP API returns.

They live with the SDK (not in ``api/`` or ``pipeline/``) so that ``pip install memq`` needs
only httpx and pydantic. Each mirrors a response body of the API (``api/schemas.py``); a test
per model checks them against a real API process, so the two cannot drift apart silently.

Every model accepts fields it does not know (a newer server may send more; they are kept, as
attributes and in ``model_dump()``). For code written against the dict answers of memq 0.1,
``answer["field"]`` and ``answer.get("field", default)`` still work; ``to_dict()`` gives the
plain JSON-shaped dict.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Batch",
    "BatchAccepted",
    "Deleted",
    "Explain",
    "Health",
    "HistoryEntry",
    "Job",
    "JobAccepted",
    "KeyCreated",
    "Memory",
    "MemoryEvent",
    "MemoryPage",
    "Message",
    "Provenance",
    "Readiness",
    "SearchHit",
    "SearchHits",
    "Shards",
    "SourceJob",
    "SourceMessage",
    "TokenUsage",
]


class MemqModel(BaseModel):
    """Base of every answer: unknown fields kept, dict-style reads kept for older code."""

    model_config = ConfigDict(extra="allow", frozen=True)

    def __getitem__(self, name: str) -> Any:
        """``answer["status"]``: the field's value; ``KeyError`` for an unknown name."""
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.to_dict()

    def get(self, name: str, default: Any = None) -> Any:
        """The field's value, or ``default`` when the answer has no such field."""
        try:
            return self[name]
        except KeyError:
            return default

    def to_dict(self) -> dict[str, Any]:
        """The answer as JSON-shaped data (datetimes as ISO-8601 strings)."""
        return self.model_dump(mode="json")


# -- jobs ------------------------------------------------------------------------------------


class JobAccepted(MemqModel):
    """A queued conversation (``add`` without ``wait``). ``created`` is false when the same
    conversation or ``Idempotency-Key`` was posted before: the existing job is answered."""

    job_id: str
    status: str
    status_url: str
    created: bool


class ReplacedMemory(MemqModel):
    """A memory that a job's new memory replaced (it is no longer true)."""

    id: str
    memory: str


class MemoryEvent(MemqModel):
    """What a job did to one memory: ``event`` is ``ADD`` (so far the only one); ``replaces``
    lists the stored memories it made untrue."""

    id: str
    memory: str
    event: str
    replaces: list[ReplacedMemory] = Field(default_factory=list)


class TokenUsage(MemqModel):
    """LLM tokens a job used, summed over its model calls (0 when no model was called)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


TERMINAL_STATUSES = frozenset({"succeeded", "failed", "dead"})
"""The statuses of a job that has ended: nothing runs it any more. The server's
``JobStatus`` sets hold the same values (a test keeps them equal)."""


class Job(MemqModel):
    """A job: ``status`` is queued, running, succeeded, failed or dead; ``phase`` the last
    phase it reached; ``counts`` facts, stored, duplicates, entities and LLM tokens;
    ``timings_ms`` per phase; ``results`` the memories it added; ``errors`` per-item failures;
    ``reason`` why it failed; ``request_id`` the ``X-Request-ID`` of the request that queued
    it."""

    job_id: str
    status: str
    phase: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    batch_id: str | None = None
    backfill: bool = False
    attempts: int = 0
    request_id: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    reason: str | None = None
    errors: list[dict[str, Any]] = Field(default_factory=list)
    results: list[MemoryEvent] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None

    @property
    def finished(self) -> bool:
        """True once the job is succeeded, failed or dead (it will not change by itself)."""
        return self.status in TERMINAL_STATUSES

    @property
    def usage(self) -> TokenUsage:
        """The LLM tokens the job used (from ``counts``)."""
        return TokenUsage(
            prompt_tokens=self.counts.get("prompt_tokens", 0),
            completion_tokens=self.counts.get("completion_tokens", 0),
        )


class JobPage(MemqModel):
    """One page of a job listing, newest first; ``next_cursor`` fetches the next one (``None``
    on the last)."""

    results: list[Job]
    next_cursor: str | None = None


class BatchAccepted(MemqModel):
    """A queued batch: its id, where to follow it, and one accepted job per item, in order."""

    batch_id: str
    status_url: str
    jobs: list[JobAccepted]


class Batch(MemqModel):
    """A batch's progress: ``counts`` of its jobs per status, ``total`` their sum."""

    batch_id: str
    total: int
    counts: dict[str, int] = Field(default_factory=dict)


# -- memories --------------------------------------------------------------------------------


class Memory(MemqModel):
    """A stored memory: its text is ``memory``; scope ids, who it is about, metadata and
    dates (``observed_at`` is when the conversation took place)."""

    id: str
    memory: str
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    actor_id: str | None = None
    role: str | None = None
    memory_type: str | None = None
    attributed_to: str | None = None
    hash: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    observed_at: datetime | None = None
    expiration_date: datetime | None = None
    # set on a memory a newer one replaced: true from observed_at until valid_until
    valid_until: datetime | None = None
    replaced_by: list[str] | None = None
    replaces: list[str] | None = None
    # a caller's verdict on it (mem0's feedback): recorded and shown, not used by search
    feedback: str | None = None
    feedback_reason: str | None = None
    # where it came from: only when asked for (``get(..., include_sources=True)``)
    provenance: Provenance | None = None


class SourceMessage(MemqModel):
    """A message a memory came from, as it was given to memq; ``seq`` is its place in its
    job's request."""

    id: str
    role: str
    name: str | None = None
    content: str
    timestamp: datetime | None = None
    job_id: str
    seq: int


class SourceJob(MemqModel):
    """The job that wrote a memory (``status`` None when its record is gone)."""

    id: str
    status: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None


class Provenance(MemqModel):
    """Where a memory came from: the messages (every message of the conversation it was
    extracted from, or the one message a raw turn is) and the job. ``known`` is false for a
    memory stored before memq recorded sources; ``missing`` counts sources no longer stored."""

    known: bool
    job: SourceJob | None = None
    sources: list[SourceMessage] = Field(default_factory=list)
    missing: int = 0


class Explain(MemqModel):
    """How a hit's score was made (``explain=True``): each signal normalised, and the fused
    score; the optional signals are ``None`` when they did not apply."""

    semantic: float
    bm25: float
    bm25_raw: float
    entity: float
    time: float | None = None
    dated: float | None = None
    feedback: float | None = None
    fused: float
    rerank: float | None = None
    rank_semantic: int | None = None
    rank_bm25: int | None = None
    rank_entity: int | None = None
    below: str | None = None  # placed below this newer statement of the same speaker
    rank: int | None = None  # the hit's place in the ranking, 1 first (by ``fused``)


class SearchHit(Memory):
    """A memory found by a search, with its ``score`` and, when asked, ``explain``: ``score``
    is on the scale of cosine similarity in [0, 1] (a mem0-style threshold means what it
    means in mem0); the hits are ranked by ``explain.fused``."""

    score: float
    explain: Explain | None = None


class Shards(MemqModel):
    """How much of the index answered a search: the shards asked, those that answered and
    those that failed, and whether the search ran out of time."""

    total: int
    successful: int
    failed: int
    timed_out: bool = False

    @property
    def partial(self) -> bool:
        """A shard failed or the search timed out: memories held elsewhere may be missing."""
        return self.failed > 0 or self.timed_out


class SearchHits(list[SearchHit]):
    """The hits of one search, best first: a plain list, which also says how much of the index
    answered. ``partial`` is true when a shard failed or the search timed out, so that memories
    held by the shards that did not answer may be missing (on a cluster that lost a node, for
    instance); ``shards`` has the counts, or ``None`` when the server sent none."""

    def __init__(
        self,
        hits: Iterable[SearchHit] = (),
        *,
        partial: bool = False,
        shards: Shards | None = None,
    ) -> None:
        super().__init__(hits)
        self.partial = partial
        self.shards = shards

    def __repr__(self) -> str:
        return f"SearchHits({list.__repr__(self)}, partial={self.partial})"


class MemoryPage(MemqModel):
    """One page of a listing; ``next_cursor`` fetches the next one (``None`` on the last)."""

    results: list[Memory]
    next_cursor: str | None = None


class HistoryEntry(MemqModel):
    """One event in a memory's life: ``event`` is ADD, UPDATE or DELETE, with old/new text."""

    id: str
    memory_id: str
    event: str
    job_id: str | None = None
    old: str | None = None
    new: str | None = None
    actor: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    replaced_by: str | None = None  # a REPLACED event: the memory that replaced it
    created_at: datetime


class Message(MemqModel):
    """A plain acknowledgement (delete, revoke)."""

    message: str


class Deleted(Message):
    """A scope deletion: ``deleted`` memories."""

    deleted: int


# -- admin and health ------------------------------------------------------------------------


class KeyCreated(MemqModel):
    """A new API key; ``key`` is shown only in this answer (the server keeps a hash)."""

    id: str
    tenant: str
    key: str


class Health(MemqModel):
    """The API process answers (``status`` is ``ok``)."""

    status: str


class Readiness(MemqModel):
    """Elasticsearch and Redis as the API sees them."""

    ready: bool
    elasticsearch: str
    redis: str
