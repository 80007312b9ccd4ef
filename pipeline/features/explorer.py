"""What the web explorer reads beyond the API's own calls: a tenant's scopes with their
memory counts and last activity, a scope's memories newest or oldest first, one memory with
everything known about it, and what erasing a user would remove.

Every function takes the tenant from the caller (a key's principal) and reads nothing of
another tenant: a memory, job or entity of another tenant is the same as an absent one. Reads
are bounded (at most ``MAX_SCOPES`` scopes, ``MAX_BROWSE_PAGE`` memories a page, a total
counted up to ``TOTAL_COUNTED``), so a page costs the same at 100k memories as at 100.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pipeline.domain.jobs import JobRecord
from pipeline.domain.models import VIEW_SOURCE_FIELDS, Scope
from pipeline.errors import InvalidInputError
from pipeline.features.provenance import Provenance, provenance_of
from pipeline.serving import crud
from pipeline.store.elastic import scope_filter
from pipeline.store.filters import translate_filters
from pipeline.store.protocol import ServingStore
from pipeline.store.reads import EntityRef, HistoryRow, MemoryRecord

MAX_SCOPES = 500
MAX_BROWSE_PAGE = 200
TOTAL_COUNTED = 10_000  # beyond this a total reads "10000+": an exact count costs a full scan


class ScopeKind(StrEnum):
    """The three kinds of scope, named by the memory field that holds their id."""

    USER = "user_id"
    AGENT = "agent_id"
    RUN = "run_id"


@dataclass(frozen=True)
class ScopeSummary:
    """One user, agent or run of a tenant: how many memories, and when one last changed."""

    id: str
    memories: int
    last_activity: str | None


@dataclass(frozen=True)
class ScopeList:
    scopes: list[ScopeSummary]
    tenant_memories: int  # all of the tenant's memories, counted up to TOTAL_COUNTED


def activity_aggregation(field: str, size: int) -> dict[str, Any]:
    """Terms on ``field``, most recently active first, each with its last ``updated_at``."""
    return {
        "terms": {"field": field, "size": size, "order": {"last": "desc"}},
        "aggs": {"last": {"max": {"field": "updated_at"}}},
    }


def summaries(buckets: list[dict[str, Any]]) -> list[ScopeSummary]:
    return [
        ScopeSummary(
            id=str(b["key"]),
            memories=int(b["doc_count"]),
            last_activity=b["last"].get("value_as_string"),
        )
        for b in buckets
    ]


def list_scopes(store: ServingStore, tenant: str, kind: ScopeKind, limit: int = 100) -> ScopeList:
    """The tenant's ``kind`` scopes, most recently active first (at most ``limit``, capped by
    ``MAX_SCOPES``): one aggregation over the tenant's memories."""
    size = max(1, min(limit, MAX_SCOPES))
    body = {
        "size": 0,
        "query": {"bool": {"filter": [{"term": {"tenant": tenant}}]}},
        "track_total_hits": TOTAL_COUNTED,
        "aggs": {"scopes": activity_aggregation(kind.value, size)},
    }
    response = store.search_memories([body], f"list the tenant's {kind.name.lower()}s")[0]
    buckets = response["aggregations"]["scopes"]["buckets"]
    return ScopeList(summaries(buckets), int(response["hits"]["total"]["value"]))


def tenant_summaries(store: ServingStore, limit: int = MAX_SCOPES) -> list[ScopeSummary]:
    """Every tenant's memory count and last activity (for administrators), most recent first."""
    body = {
        "size": 0,
        "track_total_hits": False,
        "aggs": {"scopes": activity_aggregation("tenant", max(1, min(limit, MAX_SCOPES)))},
    }
    response = store.search_memories([body], "count memories per tenant")[0]
    return summaries(response["aggregations"]["scopes"]["buckets"])


@dataclass(frozen=True)
class MemoryBrowse:
    """A page of a scope's memories: ``next_cursor`` None on the last page."""

    items: list[MemoryRecord]
    next_cursor: str | None
    total: int
    total_is_exact: bool


def browse_body(
    clauses: list[dict[str, Any]], newest_first: bool, after: list[Any] | None, size: int
) -> dict[str, Any]:
    """Sorted by ``created_at``, then the turn (the messages of one conversation in their
    order), then ``hash`` (unique in a scope: dedup keeps one memory per hash), so
    ``search_after`` pages neither skip nor repeat and need no point in time. One more than
    ``size`` is asked for, to know whether a next page exists."""
    order = "desc" if newest_first else "asc"
    sort = [{field: {"order": order}} for field in ("created_at", "turn", "hash")]
    body: dict[str, Any] = {
        "size": size + 1,
        "query": {"bool": {"filter": clauses}},
        "sort": sort,
        "_source": {"includes": [*VIEW_SOURCE_FIELDS, "job_id", "tenant"]},
        "track_total_hits": TOTAL_COUNTED,
    }
    if after is not None:
        body["search_after"] = after
    return body


def browse_memories(
    store: ServingStore,
    scope: Scope,
    filters: Mapping[str, Any] | None = None,
    *,
    newest_first: bool = True,
    size: int = 50,
    cursor: str | None = None,
) -> MemoryBrowse:
    """One page of the scope's memories matching ``filters`` (memq's filter language). Raises
    ``InvalidInputError`` for a bad size, filter or cursor."""
    if not 1 <= size <= MAX_BROWSE_PAGE:
        raise InvalidInputError(f"size must be 1..{MAX_BROWSE_PAGE}", field="size")
    clauses = [*scope_filter(scope), *translate_filters(filters)]
    after = decode_after(cursor) if cursor else None
    body = browse_body(clauses, newest_first, after, size)
    response = store.search_memories([body], "browse memories", scopes=[scope])[0]
    hits = response["hits"]["hits"]
    total = response["hits"]["total"]
    items = [MemoryRecord.from_source(h["_id"], h["_source"]) for h in hits[:size]]
    cursor = encode_after(hits[size - 1]["sort"]) if len(hits) > size else None
    return MemoryBrowse(items, cursor, int(total["value"]), total["relation"] == "eq")


def encode_after(sort: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(sort).encode()).decode()


def decode_after(cursor: str) -> list[Any]:
    try:
        after = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error) as exc:
        raise InvalidInputError("the cursor is not one memq gave out", field="cursor") from exc
    if not isinstance(after, list) or len(after) != 3:
        raise InvalidInputError("the cursor is not one memq gave out", field="cursor")
    return after


@dataclass(frozen=True)
class ConversationMessage:
    """One message of the conversation a memory came from, as the explorer shows it: its
    content as text (the text parts of a multi-part message, an image named by a
    placeholder), and ``source`` when the memory came from it."""

    role: str | None
    name: str | None
    content: str
    source: bool = False


@dataclass(frozen=True)
class MemoryDetail:
    """A memory with its history, the job that wrote it, that job's conversation (each
    message marked ``source`` when the memory came from it), the memory's entities and its
    provenance (``pipeline.features.provenance``)."""

    memory: MemoryRecord
    history: list[HistoryRow]
    job: JobRecord | None
    conversation: list[ConversationMessage]
    entities: list[EntityRef]
    provenance: Provenance


def memory_detail(store: ServingStore, tenant: str, memory_id: str) -> MemoryDetail:
    """Everything about ``memory_id`` of ``tenant``; ``NotFoundError`` when it is not one."""
    memory = crud.get_memory(store, tenant, memory_id)
    history = crud.memory_history(store, tenant, memory_id)
    job = store.get_job(memory.job_id) if memory.job_id else None
    if job is not None and job.tenant != tenant:
        job = None
    provenance = provenance_of(store, memory)
    sources = {m.seq for m in provenance.sources if job is not None and m.job_id == job.job_id}
    conversation = [
        message_view(m, source=seq in sources)
        for seq, m in enumerate(job.request.get("messages", []) if job else [])
    ]
    entities = store.entities_of(memory.scope, memory.entity_ids)
    return MemoryDetail(memory, history, job, conversation, entities, provenance)


def message_view(message: Mapping[str, Any], *, source: bool = False) -> ConversationMessage:
    """A message of a job's request (as given to memq) as the explorer shows it."""
    content = message.get("content", "")
    if isinstance(content, list):
        parts = [p.get("text", "") if p.get("type") == "text" else "[image]" for p in content]
        content = "\n".join(parts)
    return ConversationMessage(
        role=message.get("role"), name=message.get("name"), content=str(content), source=source
    )


@dataclass(frozen=True)
class ErasePreview:
    """What erasing a user removes: its memories and its jobs by status (and, without counts,
    their history text, messages, session windows, entities and buffered chat)."""

    user_id: str
    memories: int
    jobs: dict[str, int]


def erase_preview(store: ServingStore, tenant: str, user_id: str) -> ErasePreview:
    memories = store.count_memories(Scope(tenant=tenant, user_id=user_id))
    jobs = store.job_counts(tenant=tenant, user_id=user_id)
    return ErasePreview(user_id, memories, jobs)


def parse_time(raw: str, field: str) -> datetime | None:
    """An ISO-8601 time from a form (blank: None); one without a zone means UTC."""
    if not raw.strip():
        return None
    try:
        value = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidInputError(f"{field} is not an ISO-8601 time", field=field) from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
