"""Listing and bulk deletion of a scope's memories: cursor pagination over a point in time.

A page is read from a point in time (PIT) opened by the first call, sorted by ``created_at``
then the PIT's own tiebreaker, so pages never overlap or skip a memory however many there are
and whatever is written meanwhile. The cursor is opaque to callers (base64 of the PIT id and
the last sort values). ``delete_all`` pages the same way and deletes in bulk: it needs no
delete-by-query, which the minimal Elasticsearch distribution lacks.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipeline.domain.models import MemoryView, Scope, history_id
from pipeline.errors import InvalidInputError
from pipeline.store.elastic import scope_filter
from pipeline.store.filters import translate_filters
from pipeline.store.protocol import HistoryDoc, ServingStore
from pipeline.store.queries import listing_body, not_expired, validity
from pipeline.store.reads import ListedMemory

PIT_KEEP_ALIVE_S = 300
PIT_KEEP_ALIVE = f"{PIT_KEEP_ALIVE_S}s"
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True)
class Page:
    items: list[MemoryView]  # a listing reads the fields a view shows (``VIEW_SOURCE_FIELDS``)
    cursor: str | None  # None: this was the last page


def list_memories(
    store: ServingStore,
    scope: Scope,
    filters: Mapping[str, Any] | None = None,
    *,
    page_size: int = 100,
    cursor: str | None = None,
    show_expired: bool = True,
    as_of: datetime | None = None,
    include_replaced: bool = False,
) -> Page:
    """One page of the scope's memories (oldest first). Pass the returned cursor for the next.
    By validity as a search (``pipeline.store.queries.validity``): those true now, true at
    ``as_of``, or (``include_replaced``) replaced ones too. Raises ``InvalidInputError`` for
    a bad page size or a cursor that is malformed or expired."""
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidInputError(f"page_size must be 1..{MAX_PAGE_SIZE}", field="page_size")
    clauses = [*scope_filter(scope), *translate_filters(filters)]
    if not show_expired:
        clauses.append(not_expired())
    clauses += validity(as_of, include_replaced)
    pit, after = decode_cursor(cursor) if cursor else (open_pit(store, scope), None)
    listed = page_of(store, clauses, pit, after, page_size)
    items = [MemoryView.from_record(memory) for memory in listed]
    if len(listed) < page_size:
        close_pit(store, pit)
        return Page(items, None)
    return Page(items, encode_cursor(pit, listed[-1].sort))


def count_listed(
    store: ServingStore, scope: Scope, filters: Mapping[str, Any] | None = None
) -> int:
    """How many memories ``list_memories`` would show with these filters and its defaults
    (those true now, expired ones too)."""
    return store.count_memories(scope, [*translate_filters(filters), *validity(None, False)])


def iter_pages(
    store: ServingStore, scope: Scope, filters: Mapping[str, Any] | None = None
) -> Iterator[Page]:
    """Every page of the scope's memories (replaced ones too), the largest page size at a
    time."""
    cursor: str | None = None
    while True:
        page = list_memories(
            store, scope, filters, page_size=MAX_PAGE_SIZE, cursor=cursor, include_replaced=True
        )
        yield page
        if page.cursor is None:
            return
        cursor = page.cursor


def delete_all(
    store: ServingStore, scope: Scope, filters: Mapping[str, Any] | None, now: datetime
) -> int:
    """Delete every memory of the scope (matching ``filters``), page by page from one point in
    time, each with a DELETE history row; returns how many were deleted."""
    deleted = 0
    store.make_visible()  # a memory stored a moment ago must not escape its deletion
    for page in iter_pages(store, scope, filters):
        gone = store.delete_memories({item.id: owner(item, scope) for item in page.items})
        rows = [
            deletion_row(item, owner(item, scope), now) for item in page.items if item.id in gone
        ]
        store.write_history(rows)
        deleted += len(gone)
    return deleted


def owner(item: MemoryView, scope: Scope) -> Scope:
    """The full scope of a listed memory (a listing of an agent spans its users)."""
    return Scope(
        tenant=scope.tenant, user_id=item.user_id, agent_id=item.agent_id, run_id=item.run_id
    )


def deletion_row(item: MemoryView, scope: Scope, now: datetime) -> HistoryDoc:
    """The DELETE row of a listed memory, under ``scope``: the memory's own full scope, so
    that erasing its user finds the row (it keeps the text)."""
    return HistoryDoc(
        id=history_id(item.id, "DELETE", now.isoformat()),
        memory_id=item.id,
        scope=scope,
        event="DELETE",
        job_id="",
        created_at=now,
        old=item.memory or None,
    )


def open_pit(store: ServingStore, scope: Scope) -> str:
    """A point in time over the memories of ``scope``'s shard (all shards when the scope
    does not name its user); the cursor carries it, so the next pages need no scope."""
    return store.open_memories_cursor(PIT_KEEP_ALIVE, scope)


def close_cursor(store: ServingStore, cursor: str) -> None:
    """Give back the point in time of a listing left before its last page."""
    pit, _ = decode_cursor(cursor)
    close_pit(store, pit)


def close_pit(store: ServingStore, pit: str) -> None:
    store.close_cursor(pit)


def page_of(
    store: ServingStore, clauses: list[dict[str, Any]], pit: str, after: list[Any] | None, size: int
) -> list[ListedMemory]:
    listed = store.page(listing_body(clauses, pit, PIT_KEEP_ALIVE, after, size))
    if listed is None:
        raise InvalidInputError("the cursor has expired; start again without it", field="cursor")
    return listed


def encode_cursor(pit: str, after: list[Any]) -> str:
    raw = json.dumps({"pit": pit, "after": after}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_cursor(cursor: str) -> tuple[str, list[Any]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return str(data["pit"]), list(data["after"])
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise InvalidInputError("the cursor is not one memq gave out", field="cursor") from exc
