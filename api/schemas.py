"""Request and response bodies, by role: ``*Create`` / ``*Update`` in, ``*Public`` out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from pipeline.models import AwareDatetime, Identifier, MemoryType, MemoryView
from pipeline.search import SearchOptions


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScopeIds(_In):
    user_id: Identifier | None = None
    agent_id: Identifier | None = None
    run_id: Identifier | None = None


class MemoryCreate(ScopeIds):
    """A conversation to remember: a string, one message, or a list of messages."""

    messages: str | dict[str, Any] | list[dict[str, Any]]
    metadata: dict[str, Any] | None = None
    infer: bool = True
    memory_type: MemoryType | None = None
    prompt: str | None = None
    timestamp: AwareDatetime | int | None = Field(
        default=None, description="When the conversation happened (ISO-8601 or Unix seconds)"
    )
    expiration_date: AwareDatetime | None = None
    webhook_url: str | None = None
    actor_id: Identifier | None = None


class JobAccepted(BaseModel):
    job_id: str
    status: str
    status_url: str
    created: bool


class MemoryEvent(BaseModel):
    id: str
    memory: str
    event: str


class JobPublic(BaseModel):
    job_id: str
    status: str
    phase: str | None
    batch_id: str | None
    attempts: int
    counts: dict[str, int]
    timings_ms: dict[str, float]
    reason: str | None
    errors: list[dict[str, Any]]
    results: list[MemoryEvent]
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


MemoryPublic = MemoryView
"""A memory as the API returns it."""


class MemoryPage(BaseModel):
    results: list[MemoryPublic]
    next_cursor: str | None


class MemoryUpdate(_In):
    text: str | None = Field(default=None, max_length=20_000)
    metadata: dict[str, Any] | None = None


class SearchRequest(SearchOptions):
    """A search in the caller's tenant, in the scope of the given ids."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    user_id: Identifier | None = None
    agent_id: Identifier | None = None
    run_id: Identifier | None = None


class BatchSearchRequest(_In):
    queries: list[SearchRequest] = Field(min_length=1, max_length=50)


class BatchCreate(_In):
    items: list[MemoryCreate] = Field(min_length=1, max_length=1000)


class BatchAccepted(BaseModel):
    batch_id: str
    status_url: str
    jobs: list[JobAccepted]


class BatchPublic(BaseModel):
    batch_id: str
    total: int
    counts: dict[str, int]


class KeyCreate(_In):
    tenant: Annotated[Identifier, StringConstraints(pattern=r"^[^_\s][^\s]{0,127}$")] = Field(
        description="the tenant's name (not starting with '_', which is reserved)"
    )
    name: str = Field(default="", max_length=200)
    admin: bool = False


class KeyCreated(BaseModel):
    id: str
    tenant: str
    key: str = Field(description="The full key; shown once, stored only as a hash")


class ErrorBody(BaseModel):
    type: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
    detail: str
