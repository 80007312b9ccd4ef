"""Request and response bodies, by role: ``*Create`` / ``*Update`` in, ``*Public`` out."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from pipeline.domain.models import AwareDatetime, Identifier, MemoryType, MemoryView
from pipeline.features.provenance import Provenance
from pipeline.serving.search import SearchHit, SearchOptions


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScopeIds(_In):
    user_id: Identifier | None = None
    agent_id: Identifier | None = None
    run_id: Identifier | None = None


class MemoryCreate(ScopeIds):
    """A conversation to remember: a string, one message, or a list of messages."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "messages": [
                        {"role": "user", "name": "Alice", "content": "I moved to Lisbon last year"},
                        {"role": "assistant", "content": "How do you like it?"},
                    ],
                    "user_id": "alice",
                    "timestamp": "2026-11-30T09:00:00Z",
                    "metadata": {"source": "chat"},
                }
            ]
        }
    )

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
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "job_id": "3f1c9e0a7b2d4c58",
                    "status": "queued",
                    "status_url": "http://127.0.0.1:8000/v1/jobs/3f1c9e0a7b2d4c58",
                    "created": True,
                }
            ]
        }
    )

    job_id: str
    status: str
    status_url: str
    created: bool


class ReplacedPublic(BaseModel):
    """A memory a job's new memory replaced: it stopped being true (see ``valid_until``)."""

    id: str
    memory: str


class MemoryEvent(BaseModel):
    id: str
    memory: str
    event: str
    replaces: list[ReplacedPublic] = Field(default_factory=list)


class JobPublic(BaseModel):
    job_id: str
    status: str
    phase: str | None
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    batch_id: str | None
    attempts: int
    request_id: str | None = None  # the X-Request-ID of the request that queued the job
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

Include = Literal["sources"]
INCLUDE = (
    "more to return with the memory: 'sources' adds its provenance (the messages it came "
    "from and the job that wrote it)"
)


class MemoryDetail(MemoryView):
    """A memory read by id; ``provenance`` only when asked for (``include=sources``)."""

    provenance: Provenance | None = None


class JobPage(BaseModel):
    """A page of jobs, newest first; ``next_cursor`` fetches the next (None: the last)."""

    results: list[JobPublic]
    next_cursor: str | None


class MemoryPage(BaseModel):
    results: list[MemoryPublic]
    next_cursor: str | None


class MemoryUpdate(_In):
    text: str | None = Field(default=None, max_length=20_000)
    metadata: dict[str, Any] | None = None


class SearchRequest(SearchOptions):
    """A search in the caller's tenant, in the scope of the given ids (at the top level, or
    inside ``filters`` as mem0 2.x writes them)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=False,
        json_schema_extra={
            "examples": [
                {"query": "where does alice live", "user_id": "alice", "top_k": 5},
                {
                    "query": "what does alice drink",
                    "filters": {"AND": [{"user_id": "alice"}, {"source": "chat"}]},
                    "explain": True,
                },
            ]
        },
    )

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
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "type": "invalid_input",
                        "message": "give at least one of user_id, agent_id, run_id",
                        "field": "user_id",
                    },
                    "detail": "give at least one of user_id, agent_id, run_id",
                }
            ]
        }
    )

    error: ErrorBody
    detail: str


class Message(BaseModel):
    """An acknowledgement."""

    message: str


class Deleted(Message):
    deleted: int = Field(description="how many memories were deleted")


class ShardsPublic(BaseModel):
    """How much of the index answered a search."""

    total: int = Field(description="shards the search asked")
    successful: int = Field(description="shards that answered")
    failed: int = Field(description="shards that failed: their memories are missing")
    timed_out: bool = Field(description="the search ran out of time before every shard answered")


_PARTIAL = (
    "true when a shard failed or the search timed out: the hits are the best of what answered, "
    "and memories held by the shards that did not may be missing"
)


class SearchResults(BaseModel):
    results: list[SearchHit]
    partial: bool = Field(default=False, description=_PARTIAL)
    shards: ShardsPublic | None = None


class BatchSearchResults(BaseModel):
    results: list[list[SearchHit]] = Field(description="one list of hits per query, in order")
    partial: bool = Field(default=False, description=f"any query partial; {_PARTIAL}")
    shards: list[ShardsPublic] = Field(default_factory=list, description="per query, in order")


class HistoryEntry(BaseModel):
    """One ADD, UPDATE or DELETE event of a memory."""

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


class KeyPublic(BaseModel):
    """An API key as admins list it (never its secret)."""

    id: str
    tenant: str
    name: str = ""
    role: str
    created_at: datetime
    revoked_at: datetime | None = None


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    ready: bool
    elasticsearch: str
    redis: str


class WebhookSigning(BaseModel):
    """How this tenant's job webhooks are signed."""

    key: str = Field(description="the tenant's signing key (HMAC-SHA256)")
    header: str = Field(description="the header that carries ``sha256=<hex>``")
    timestamp_header: str = Field(description="the header whose value is signed with the body")


class WebhookAck(BaseModel):
    """A chat platform's event was received; ``accepted`` when it joined a conversation."""

    ok: bool = True
    accepted: bool = False


class SlackChallenge(BaseModel):
    """Slack's url_verification handshake, answered with its own challenge."""

    challenge: str


class Mem0Ping(BaseModel):
    status: str
    org_id: str
    project_id: str
    user_email: str


class Mem0Event(BaseModel):
    id: str
    memory: str
    event: str
    previous_memory: str | None = None  # an UPDATE: the text it replaced


class Mem0Added(BaseModel):
    """mem0's add reply: the events when the job finished, else ``PENDING`` and the job id."""

    results: list[Mem0Event]
    status: str | None = None
    event_id: str | None = None
    job_id: str | None = None

    @classmethod
    def pending(cls, job_id: str) -> Mem0Added:
        """A job not finished yet (or queued only: ``async_mode``)."""
        return cls(results=[], status="PENDING", event_id=job_id, job_id=job_id)


class Mem0Hit(MemoryPublic):
    score: float


class Mem0Results(BaseModel):
    results: list[Mem0Hit]
    # only present (true) when the result is partial: mem0's own answers have no such key
    partial: bool | None = Field(default=None, description=_PARTIAL)
    shards: ShardsPublic | None = None


class Mem0Page(BaseModel):
    """mem0's page-numbered listing (``next``/``previous`` are page numbers or null)."""

    count: int
    next: int | None
    previous: int | None
    results: list[MemoryPublic]

    def wire(self) -> dict[str, Any]:
        """As mem0 sends it: ``next`` and ``previous`` stay (null on the ends) while each
        memory leaves out its empty fields."""
        page = self.model_dump(mode="json", exclude={"results"})
        memories = [m.model_dump(mode="json", exclude_none=True) for m in self.results]
        return page | {"results": memories}


class Mem0Updated(MemoryPublic):
    message: str


class Mem0HistoryEntry(BaseModel):
    id: str
    memory_id: str
    event: str
    old_memory: str | None = None
    new_memory: str | None = None
    created_at: datetime | None = None


class Mem0Entity(BaseModel):
    """A user, agent or run with memories, as mem0's ``users()`` lists it (``id`` is its
    name: memq keeps no other id for it; ``owner`` and ``organization`` are the tenant)."""

    id: str
    name: str
    type: str
    total_memories: int
    created_at: datetime | None = None
    updated_at: datetime | None = None
    owner: str
    organization: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class Mem0Entities(BaseModel):
    count: int
    next: int | None = None
    previous: int | None = None
    results: list[Mem0Entity]


class Mem0EntityDeleted(BaseModel):
    message: str
    deleted: int | None = None  # an agent's or run's memories deleted
    erased: dict[str, int] | None = None  # a user's data erased, per place
    in_flight: list[str] | None = None  # a user's unfinished jobs (repeat once they end)


class Mem0ExportCreated(BaseModel):
    message: str
    id: str


class Mem0Export(BaseModel):
    """memq's dump of the selected memories (``pipeline.features.export``), read when fetched; the
    caller's schema is not applied (that needs a model call)."""

    id: str
    format: str
    version: int
    exported_at: datetime
    selector: dict[str, str]
    count: int
    memories: list[dict[str, Any]]


class Mem0FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memory_id: str = Field(min_length=1, max_length=128)
    feedback: Literal["POSITIVE", "NEGATIVE", "VERY_NEGATIVE"] | None = None
    feedback_reason: str | None = Field(default=None, max_length=2000)


class Mem0FeedbackOut(BaseModel):
    id: str
    feedback: str | None = None
    feedback_reason: str | None = None
    message: str


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {
        "model": ErrorResponse,
        "description": "The request was refused; ``error.field`` names what was wrong "
        "(401 no or bad key, 403 not allowed, 404 absent or another tenant's, 409 conflict, "
        "413 body too large, 422 invalid input, 429 rate limited with Retry-After)",
    },
    "5XX": {
        "model": ErrorResponse,
        "description": "Elasticsearch or Redis unavailable: 503 with Retry-After; retry later",
    },
}
"""memq's error body, declared for every operation instead of FastAPI's default 422 shape."""


class UsagePublic(BaseModel):
    """What a tenant used (``pipeline.features.usage``): jobs ended (``failed_jobs`` of them failed
    or dead), memories stored, LLM tokens and calls, and texts embedded."""

    jobs: int
    failed_jobs: int
    memories: int
    prompt_tokens: int
    completion_tokens: int
    tokens: int = Field(description="prompt_tokens + completion_tokens: what a budget counts")
    llm_calls: int
    embeddings: int = Field(description="texts embedded for the jobs (facts and new turns)")


class DayUsagePublic(UsagePublic):
    day: date = Field(description="a UTC day: the jobs that ended on it")


class BudgetPublic(BaseModel):
    """A tenant's monthly token budget (``monthly_tokens`` null: none) and the tokens of the
    current UTC month (``month``, ``YYYY-MM``)."""

    tenant: str
    monthly_tokens: int | None
    month: str
    month_tokens: int
    spent: bool = Field(description="extraction is refused until the month ends or it is raised")


class UsageReportPublic(BaseModel):
    tenant: str
    from_: date = Field(alias="from", serialization_alias="from")
    to: date
    total: UsagePublic
    days: list[DayUsagePublic]
    budget: BudgetPublic

    model_config = ConfigDict(populate_by_name=True)


class BudgetSet(_In):
    monthly_tokens: int = Field(
        ge=1, le=10**15, description="LLM tokens (prompt + completion) the tenant may use a month"
    )


class EmbedderPublic(BaseModel):
    """An embedder, as an index version records it: vectors of two embedders do not compare."""

    kind: str
    model: str
    dims: int
    base_url: str | None = None


class ReprocessProgressPublic(BaseModel):
    """Where a reprocess is with a build, as the run recorded it in the build's mapping (any
    process reads it). A run killed outright records nothing more: its ``updated_at`` stops
    moving while ``active`` says false."""

    mode: str = Field(description="what the run does: reembed")
    stage: Literal["sync", "catch-up", "switched", "failed"] = Field(
        description="sync: copying page by page; catch-up: writes paused, the build brought "
        "level; switched: the aliases moved (done); failed: stopped by an error (reason)"
    )
    kind: str | None = Field(description="the kind being synced or caught up (memories, entities)")
    done: int = Field(description="documents of kind synced so far in this pass")
    total: int = Field(description="documents of kind in the version in use")
    started_at: datetime = Field(description="when this run started (a resumed run: its own)")
    updated_at: datetime = Field(description="the run's last write; at most ~2 s old while it runs")
    reason: str | None = Field(default=None, description="why it failed (stage failed)")


class IndexVersionPublic(BaseModel):
    """One index version of a vector kind: ``in use`` (behind the alias), ``building`` (a
    ``memq reprocess`` of the one in use: ``documents`` against the one in use is its progress)
    or ``old`` (left by a reprocess until ``--drop-old``)."""

    kind: str
    index: str
    state: Literal["in use", "building", "old"]
    documents: int
    embedder: EmbedderPublic
    progress: ReprocessProgressPublic | None = Field(
        default=None, description="the last progress a reprocess recorded in this version"
    )


class ReprocessStatusPublic(BaseModel):
    """The embedder searches and new memories use now, every version of the memories and
    entities (``memq reprocess``), and whether a run is active now."""

    embedder: EmbedderPublic
    versions: list[IndexVersionPublic]
    active: bool | None = Field(
        default=False,
        description="a run holds the reprocess lock (running, or waiting for a worker); null "
        "while Redis cannot be read; it "
        "lapses within 15 s of its process's death",
    )
    run_id: str | None = Field(default=None, description="the active run's id")


class EmbedderChoice(_In):
    """The embedder to move to; each field left out is the server's ``MEMQ_EMBEDDER_*``."""

    kind: Literal["local", "openai"] | None = None
    model: str | None = Field(default=None, min_length=1, max_length=500)
    dims: int | None = Field(default=None, ge=8, le=4096)
    base_url: str | None = Field(default=None, min_length=1, max_length=2000)


class ReprocessCreate(_In):
    """A reprocess to start (``memq reprocess``, on a worker)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "mode": "reembed",
                    "embedder": {"model": "text-embedding-3-small", "dims": 1536},
                    "rate": 200,
                }
            ]
        }
    )

    mode: Literal["reembed", "reextract"] = Field(
        description="reembed: make every vector again with ``embedder``; reextract: make the "
        "memories again from the stored conversations with the workers' LLM (the embedder "
        "stays the one in use)"
    )
    embedder: EmbedderChoice = Field(default_factory=EmbedderChoice)
    tenant: Identifier | None = Field(
        default=None, description="reextract: only this tenant's memories (default: all)"
    )
    rate: float | None = Field(
        default=None, gt=0, description="documents (reembed) or jobs (reextract) a second at most"
    )
    drop_old: bool = Field(default=False, description="delete the replaced version after it")
    dry_run: bool = Field(default=False, description="answer the cost, start nothing")


class ReprocessPlanPublic(BaseModel):
    """What a reprocess would cost (a dry run); nothing was started."""

    embedder: EmbedderPublic
    memories: int = Field(description="memories to embed (reembed)")
    entities: int = Field(description="entities to embed (reembed)")
    embedding_calls: int
    llm_calls: int = Field(description="reextract: the LLM calls the jobs took when they ran")
    llm_tokens: int = Field(description="reextract: the LLM tokens the jobs took when they ran")
    jobs: int = Field(default=0, description="jobs to replay (reextract)")
    messages: int = Field(default=0, description="their messages (reextract)")
    uncounted: int = Field(
        default=0, description="jobs to replay whose record has no LLM count (reextract)"
    )


class ReprocessStartedPublic(BaseModel):
    """A reprocess handed to a worker: its builds fill while memq keeps serving; the status
    URL shows their progress."""

    run_id: str
    embedder: EmbedderPublic
    builds: list[str] = Field(description="the index versions being built")
    status_url: str
