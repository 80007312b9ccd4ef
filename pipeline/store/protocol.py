"""What the ingestion phases need from storage, and the documents they write.

Two implementations keep the same ``Store`` contract: ``ElasticStore`` (the real one) and
``InMemoryStore`` (for unit tests and the SDK's local mode without Elasticsearch). One suite,
tests/integration/test_store_contract.py, runs over both against a real node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from pipeline.domain.jobs import JobRecord
from pipeline.domain.models import ContextMessage, ExistingMemory, Scope
from pipeline.domain.validity import Closure, Replacement
from pipeline.store.derived import with_derived
from pipeline.store.filters import metadata_pairs
from pipeline.store.reads import (
    EntityRef,
    HistoryRow,
    JobSummary,
    KeyDocument,
    ListedKey,
    ListedMemory,
    MemoryRecord,
    StoredMessage,
    StoreHealth,
)

# JobRecord lives in pipeline.domain.jobs, and stays importable from here
__all__ = [
    "EntityDoc",
    "EntityLink",
    "HistoryDoc",
    "JobRecord",
    "KeyRecords",
    "MemoryDoc",
    "ServingStore",
    "SessionMessages",
    "Store",
    "StoredHash",
    "WriteOutcome",
    "without_none",
]


def without_none(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that have a value (absent ones are left out of a document, not null)."""
    return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True)
class MemoryDoc:
    """A memory as stored. ``id`` is deterministic (see ``models.memory_id``)."""

    id: str
    scope: Scope
    text: str
    text_lemmatized: str
    embedding: list[float]
    hash: str
    job_id: str
    created_at: datetime
    observed_at: datetime
    role: str = "user"
    attributed_to: str = "user"
    actor_id: str | None = None
    speaker: str | None = None
    memory_type: str | None = None
    language: str = "en"
    metadata: dict[str, Any] = field(default_factory=dict)
    expiration_date: datetime | None = None
    entity_ids: tuple[str, ...] = ()
    turn: int | None = None  # its message's place in the job (verbatim memories only)
    source_ids: tuple[str, ...] = ()  # the messages it came from (``models.message_id``)

    def source(self) -> dict[str, Any]:
        """The Elasticsearch ``_source`` of this memory."""
        doc: dict[str, Any] = {
            **self.scope.fields(),
            "text": self.text,
            "text_lemmatized": self.text_lemmatized,
            "embedding": self.embedding,
            "hash": self.hash,
            "job_id": self.job_id,
            "role": self.role,
            "attributed_to": self.attributed_to,
            "language": self.language,
            "metadata": self.metadata,
            "metadata_kv": metadata_pairs(self.metadata),
            "entity_ids": list(self.entity_ids),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.created_at.isoformat(),
            "observed_at": self.observed_at.isoformat(),
        }
        optional = {
            "actor_id": self.actor_id,
            "speaker": self.speaker,
            "memory_type": self.memory_type,
            "expiration_date": self.expiration_date.isoformat() if self.expiration_date else None,
            "turn": self.turn,
            "source_ids": list(self.source_ids) or None,
        }
        return with_derived(doc | without_none(optional))


@dataclass(frozen=True)
class HistoryDoc:
    id: str
    memory_id: str
    scope: Scope
    event: str
    job_id: str
    created_at: datetime
    old: str | None = None
    new: str | None = None
    actor: str | None = None
    replaced_by: str | None = None  # REPLACED: the memory that says what is true instead

    def source(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            **self.scope.fields(),
            "memory_id": self.memory_id,
            "event": self.event,
            "job_id": self.job_id,
            "created_at": self.created_at.isoformat(),
        }
        optional = {
            "old": self.old,
            "new": self.new,
            "actor": self.actor,
            "replaced_by": self.replaced_by,
        }
        return doc | without_none(optional)


@dataclass(frozen=True)
class EntityDoc:
    id: str
    scope: Scope
    text: str
    normalized: str
    type: str
    embedding: list[float]
    created_at: datetime

    def source(self, linked_memory_ids: Sequence[str]) -> dict[str, Any]:
        return {
            **self.scope.fields(),
            "text": self.text,
            "normalized": self.normalized,
            "type": self.type,
            "embedding": self.embedding,
            "linked_memory_ids": sorted(set(linked_memory_ids)),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True)
class EntityLink:
    """Link ``memory_ids`` to entity ``target``: ``entity`` itself (created when missing) or a
    similar entity of the scope it merges into."""

    entity: EntityDoc
    memory_ids: list[str]
    target: str


@dataclass(frozen=True)
class SessionMessages:
    """A job's messages, to be appended to its session's window."""

    scope: Scope
    job_id: str
    messages: list[ContextMessage]
    at: datetime


@dataclass(frozen=True)
class StoredHash:
    """What holds an id already: its text hash and the job that wrote it."""

    hash: str
    job_id: str | None


@dataclass
class WriteOutcome:
    """The per-item result of a bulk create: nothing is reported stored unless it was."""

    created: list[str] = field(default_factory=list)
    conflicts: dict[str, StoredHash] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class Store(Protocol):
    """Storage used by the ingestion phases. Every write is idempotent under its ids.

    Failures raise ``TransientError`` (retry) or ``PermanentError``; per-item problems of bulk
    writes are returned in ``WriteOutcome``, never raised.
    """

    def recent_messages(self, scope: Scope, limit: int) -> list[ContextMessage]:
        """The last ``limit`` messages of the scope's window, oldest first."""
        ...

    def recent_messages_many(
        self, scopes: Sequence[Scope], limit: int
    ) -> list[list[ContextMessage]]:
        """``recent_messages`` of each scope, in one call."""
        ...

    def append_messages(
        self, scope: Scope, job_id: str, messages: Sequence[ContextMessage], at: datetime
    ) -> None: ...

    def finish_jobs(self, entries: Sequence[SessionMessages], records: Sequence[JobRecord]) -> None:
        """Append each entry's messages to its scope's window (once per job, however often it
        is called) and save the records, in one call; any failure raises."""
        ...

    def similar_memories(
        self, scope: Scope, vector: Sequence[float], k: int
    ) -> list[ExistingMemory]: ...

    def similar_memories_many(
        self,
        queries: Sequence[tuple[Scope, Sequence[float]]],
        k: int,
        valid_at: Sequence[datetime] | None = None,
    ) -> list[list[ExistingMemory]]:
        """``similar_memories`` of each (scope, vector), in one call; with ``valid_at`` (one
        time per query), only the memories not yet replaced at that time."""
        ...

    def hashes_in_scope(self, scope: Scope, hashes: Sequence[str]) -> set[str]:
        """Which of ``hashes`` some memory of the scope already has."""
        ...

    def hashes_in_scopes(
        self, queries: Sequence[tuple[Scope, Sequence[str]]], not_of_jobs: Sequence[str] = ()
    ) -> list[set[str]]:
        """``hashes_in_scope`` of each (scope, hashes), in one call, leaving out memories
        written by the jobs ``not_of_jobs`` (a replayed job's own earlier writes)."""
        ...

    def create_memories(self, docs: Sequence[MemoryDoc]) -> WriteOutcome:
        """Create each doc unless its id exists (then it is listed in ``conflicts``)."""
        ...

    def write_history(self, rows: Sequence[HistoryDoc]) -> WriteOutcome: ...

    def create_memories_with_history(
        self, docs: Sequence[MemoryDoc], rows: Sequence[HistoryDoc], refresh: bool = False
    ) -> tuple[WriteOutcome, WriteOutcome]:
        """``create_memories`` and ``write_history`` in one call: the outcome of each.
        ``refresh``: what was written is searchable when this returns."""
        ...

    def delete_history(self, rows: Sequence[HistoryDoc]) -> None:
        """Remove these history rows (written for memories that turned out not to be ours)."""
        ...

    def replace_memories(self, replacements: Sequence[Replacement]) -> list[Closure | None]:
        """Apply each replacement (``pipeline.domain.validity``): the older of its two memories gets
        ``valid_until`` (the earliest closing time) and the newer in ``replaced_by``, the newer
        the older in ``replaces``. One closure per replacement, in order (None when one of its
        memories is gone). Concurrent callers never lose each other's changes; applying the
        same replacements again changes nothing. Visible to search when it returns."""
        ...

    def nearest_entities(
        self, scope: Scope, vectors: Sequence[Sequence[float]]
    ) -> list[tuple[str, float] | None]:
        """For each vector, the most similar entity of the scope and its cosine similarity."""
        ...

    def nearest_entities_many(
        self, queries: Sequence[tuple[Scope, Sequence[float]]]
    ) -> list[tuple[str, float] | None]:
        """``nearest_entities`` of each (scope, vector), in one call."""
        ...

    def link_entities(
        self, links: Sequence[EntityLink], update_memories: bool = True, refresh: bool = False
    ) -> None:
        """Record every link: each target entity (created when missing, under the target's id)
        gains the memory ids, and (``update_memories``; not when the memories were created with
        them) each memory's ``entity_ids`` becomes its targets. Concurrent callers never lose
        each other's links. ``refresh``: the links are searchable when this returns."""
        ...

    def save_job(self, record: JobRecord) -> None: ...

    def save_jobs(self, records: Sequence[JobRecord]) -> None: ...

    def get_job(self, job_id: str) -> JobRecord | None: ...

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord | None]: ...


SearchIndex = Literal["memories", "entities"]
"""The indices search reads (``pipeline.store.indices.Kind`` values)."""


@runtime_checkable
class ServingStore(Store, Protocol):
    """What reading and editing memories needs on top of ``Store``: crud, listing, search and
    the operators' views of jobs. ``ElasticStore`` implements it; search bodies are built by
    ``pipeline.store.queries``. Failures raise ``TransientError`` or ``PermanentError``."""

    def search_memories(
        self,
        bodies: Sequence[dict[str, Any]],
        what: str,
        named: bool = False,
        scopes: Sequence[Scope | None] | None = None,
    ) -> list[dict[str, Any]]:
        """One full search response per body over the memories, in one round trip (``named``:
        with the score of each named query a hit matched; ``scopes``: the scope each body
        reads, so it visits only that scope's shard when it can)."""
        ...

    def search_indices(
        self,
        searches_by_index: Sequence[tuple[SearchIndex, Scope | None, dict[str, Any]]],
        what: str,
        named: bool = False,
    ) -> list[dict[str, Any]]:
        """As ``search_memories``, each search over the index it names (memories or
        entities); searches that do not wait on one another share one round trip."""
        ...

    def entities_by_name(self, scope: Scope, names: Sequence[str]) -> dict[str, str]:
        """The scope's entities whose normalized text is one of ``names``: name -> entity id."""
        ...

    def entity_links(self, scope: Scope, entity_ids: Sequence[str]) -> dict[str, list[str]]:
        """Entity id -> the ids of the memories it is linked to, for entities of ``scope``."""
        ...

    def entities_of(self, scope: Scope, entity_ids: Sequence[str]) -> list[EntityRef]:
        """The entities ``entity_ids`` of ``scope`` (ids that are gone are left out)."""
        ...

    def make_visible(self) -> None:
        """What was written to the memories is searchable when this returns."""
        ...

    def get_memory(self, memory_id: str) -> MemoryRecord | None:
        """A memory, or None (its scope unknown: every shard)."""
        ...

    def get_messages(self, ids: Sequence[str], routing: str) -> dict[str, StoredMessage]:
        """The stored messages among ``ids``, which live on the shard of ``routing``: id ->
        message; ids with no message are left out."""
        ...

    def update_memory(self, memory_id: str, fields: dict[str, Any], scope: Scope) -> None:
        """Change fields of the memory ``memory_id``, which belongs to ``scope``."""
        ...

    def memory_history(self, memory_id: str, limit: int = 1000) -> list[HistoryRow]:
        """History rows of a memory, oldest first."""
        ...

    def delete_memories(self, memories: Mapping[str, Scope]) -> set[str]:
        """Delete memories (id -> the scope it belongs to); the ids that existed and are now
        gone."""
        ...

    def open_memories_cursor(self, keep_alive: str, scope: Scope | None = None) -> str:
        """A point in time over the memories (its id); over ``scope``'s shard when it can."""
        ...

    def close_cursor(self, pit: str) -> None: ...

    def page(self, body: dict[str, Any]) -> list[ListedMemory] | None:
        """The memories of one search over a point in time, or None when it has expired."""
        ...

    def count_memories(self, scope: Scope, where: Sequence[dict[str, Any]] = ()) -> int:
        """How many of the scope's memories match every clause of ``where`` (all of them when
        it is empty)."""
        ...

    def job_counts(
        self, tenant: str | None = None, batch_id: str | None = None, user_id: str | None = None
    ) -> dict[str, int]:
        """Jobs per status: all, or a tenant's (batch's, user's)."""
        ...

    def jobs_in_status(self, status: str, limit: int) -> list[JobSummary]:
        """The latest ``limit`` jobs in ``status``."""
        ...

    def refresh_jobs(self) -> None: ...

    def search_jobs(self, body: dict[str, Any]) -> list[tuple[JobRecord, list[Any]]]: ...

    def health(self) -> StoreHealth:
        """The storage behind the store (``status`` is ``green``, ``yellow`` or ``red``);
        ``TransientError`` when it cannot be reached."""
        ...


@runtime_checkable
class KeyRecords(Protocol):
    """The stored documents of API keys (``pipeline.serving.keys`` makes, hashes and checks them).
    Writes are visible to every reader when they return. Failures raise ``TransientError``
    or ``PermanentError``."""

    def create_key(self, key_id: str, document: KeyDocument) -> None:
        """Store a new key; ``PermanentError`` when ``key_id`` is already taken."""
        ...

    def get_key(self, key_id: str) -> KeyDocument | None:
        """The key's document, or None when there is no such key."""
        ...

    def update_key(self, key_id: str, fields: dict[str, Any]) -> bool:
        """Set ``fields`` on the key's document; False when there is no such key."""
        ...

    def list_keys(self, tenant: str | None = None) -> list[ListedKey]:
        """Every key (of ``tenant`` when given), oldest first, without the secret's hash."""
        ...

    def key_ids(self) -> list[str]:
        """The id of every key, revoked ones too (nothing else is read)."""
        ...
