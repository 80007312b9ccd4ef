"""``InMemoryStore``: the ``Store`` protocol in process memory, with the same semantics as
``ElasticStore`` (create conflicts, scope filters, cosine ranking). For unit tests and the
SDK's local mode; thread-safe, not persistent."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import ContextMessage, ExistingMemory, Scope, message_id
from pipeline.domain.validity import Closure, Replacement, as_time, changes_of, closure_of, merged
from pipeline.errors import PermanentError
from pipeline.store.protocol import (
    EntityLink,
    HistoryDoc,
    MemoryDoc,
    SessionMessages,
    StoredHash,
    WriteOutcome,
)
from pipeline.store.reads import KeyDocument, ListedKey, MemoryRecord, StoreHealth


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def still_valid(source: dict[str, Any], at: datetime) -> bool:
    """Not yet replaced at ``at`` (as ``elastic.still_valid``)."""
    until = as_time(source.get("valid_until"))
    return until is None or until > at


def in_scope(source: dict[str, Any], scope: Scope) -> bool:
    return all(source.get(field) == value for field, value in scope.fields().items())


class InMemoryStore:
    def __init__(self) -> None:
        self.memories: dict[str, dict[str, Any]] = {}
        self.history: dict[str, dict[str, Any]] = {}
        self.entities: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, JobRecord] = {}
        self.keys: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()

    def recent_messages(self, scope: Scope, limit: int) -> list[ContextMessage]:
        with self._lock:
            window = [m for m in self.messages.values() if m["session_key"] == scope.key]
        window.sort(key=lambda m: (m["created_at"], m["seq"]))
        return [
            ContextMessage(role=m["role"], content=m["content"], name=m["name"])
            for m in window[-limit:]
        ]

    def append_messages(
        self, scope: Scope, job_id: str, messages: Sequence[ContextMessage], at: datetime
    ) -> None:
        with self._lock:
            for seq, message in enumerate(messages):
                self.messages[message_id(job_id, seq)] = {
                    "session_key": scope.key,
                    "seq": seq,
                    "created_at": at,
                    **message.model_dump(),
                }

    def recent_messages_many(
        self, scopes: Sequence[Scope], limit: int
    ) -> list[list[ContextMessage]]:
        return [self.recent_messages(scope, limit) for scope in scopes]

    def finish_jobs(self, entries: Sequence[SessionMessages], records: Sequence[JobRecord]) -> None:
        for entry in entries:
            self.append_messages(entry.scope, entry.job_id, entry.messages, entry.at)
        self.save_jobs(records)

    def similar_memories_many(
        self,
        queries: Sequence[tuple[Scope, Sequence[float]]],
        k: int,
        valid_at: Sequence[datetime] | None = None,
    ) -> list[list[ExistingMemory]]:
        times: Sequence[datetime | None] = valid_at or [None] * len(queries)
        return [
            self.similar_memories(scope, vector, k, at)
            for (scope, vector), at in zip(queries, times, strict=True)
        ]

    def hashes_in_scopes(
        self, queries: Sequence[tuple[Scope, Sequence[str]]], not_of_jobs: Sequence[str] = ()
    ) -> list[set[str]]:
        return [self._hashes(scope, hashes, set(not_of_jobs)) for scope, hashes in queries]

    def create_memories_with_history(
        self, docs: Sequence[MemoryDoc], rows: Sequence[HistoryDoc], refresh: bool = False
    ) -> tuple[WriteOutcome, WriteOutcome]:
        return self.create_memories(docs), self.write_history(rows)

    def delete_history(self, rows: Sequence[HistoryDoc]) -> None:
        with self._lock:
            for row in rows:
                self.history.pop(row.id, None)

    def nearest_entities_many(
        self, queries: Sequence[tuple[Scope, Sequence[float]]]
    ) -> list[tuple[str, float] | None]:
        return [self.nearest_entities(scope, [vector])[0] for scope, vector in queries]

    def similar_memories(
        self, scope: Scope, vector: Sequence[float], k: int, valid_at: datetime | None = None
    ) -> list[ExistingMemory]:
        with self._lock:
            candidates = [
                (i, m)
                for i, m in self.memories.items()
                if in_scope(m, scope) and (valid_at is None or still_valid(m, valid_at))
            ]
        ranked = sorted(candidates, key=lambda im: -cosine(vector, im[1]["embedding"]))
        return [ExistingMemory(id=i, text=m["text"]) for i, m in ranked[:k]]

    def hashes_in_scope(self, scope: Scope, hashes: Sequence[str]) -> set[str]:
        return self._hashes(scope, hashes, set())

    def _hashes(self, scope: Scope, hashes: Sequence[str], not_of_jobs: set[str]) -> set[str]:
        wanted = set(hashes)
        with self._lock:
            return {
                m["hash"]
                for m in self.memories.values()
                if m["hash"] in wanted and in_scope(m, scope) and m.get("job_id") not in not_of_jobs
            }

    def create_memories(self, docs: Sequence[MemoryDoc]) -> WriteOutcome:
        outcome = WriteOutcome()
        with self._lock:
            for doc in docs:
                if doc.id in self.memories:
                    held = self.memories[doc.id]
                    outcome.conflicts[doc.id] = StoredHash(held["hash"], held.get("job_id"))
                else:
                    self.memories[doc.id] = doc.source()
                    outcome.created.append(doc.id)
        return outcome

    def write_history(self, rows: Sequence[HistoryDoc]) -> WriteOutcome:
        outcome = WriteOutcome()
        with self._lock:
            for row in rows:
                if row.id in self.history:
                    outcome.conflicts[row.id] = StoredHash("", row.job_id)
                else:
                    self.history[row.id] = row.source()
                    outcome.created.append(row.id)
        return outcome

    def replace_memories(self, replacements: Sequence[Replacement]) -> list[Closure | None]:
        """The same merge as ``ElasticStore``'s, under the store's lock."""
        with self._lock:
            closures = [closure_of(r, self.memories) for r in replacements]
            for memory, change in changes_of(closures).items():
                fields = merged(self.memories[memory], change)
                self.memories[memory].update(fields or {})
        return closures

    def nearest_entities(
        self, scope: Scope, vectors: Sequence[Sequence[float]]
    ) -> list[tuple[str, float] | None]:
        with self._lock:
            pool = [(i, e) for i, e in self.entities.items() if in_scope(e, scope)]
        return [self._nearest(pool, vector) for vector in vectors]

    @staticmethod
    def _nearest(
        pool: list[tuple[str, dict[str, Any]]], vector: Sequence[float]
    ) -> tuple[str, float] | None:
        scored = [(i, cosine(vector, e["embedding"])) for i, e in pool]
        return max(scored, key=lambda s: s[1]) if scored else None

    def link_entities(
        self, links: Sequence[EntityLink], update_memories: bool = True, refresh: bool = False
    ) -> None:
        targets: dict[str, set[str]] = {}
        with self._lock:
            for link in links:
                if link.target not in self.entities:
                    self.entities[link.target] = link.entity.source(link.memory_ids)
                held = self.entities[link.target]
                linked = set(held["linked_memory_ids"]) | set(link.memory_ids)
                held["linked_memory_ids"] = sorted(linked)
                for memory in link.memory_ids:
                    targets.setdefault(memory, set()).add(link.target)
            if update_memories:
                for memory, entity_ids in targets.items():
                    if memory in self.memories:
                        self.memories[memory]["entity_ids"] = sorted(entity_ids)

    def save_job(self, record: JobRecord) -> None:
        with self._lock:
            self.jobs[record.job_id] = record

    def create_job(self, record: JobRecord) -> JobRecord | None:
        """``record`` unless the job has one already, which is returned (None: written)."""
        with self._lock:
            existing = self.jobs.get(record.job_id)
            if existing is None:
                self.jobs[record.job_id] = record
            return existing

    def parked_jobs(self, limit: int, fresh: bool = False) -> list[JobRecord]:
        """``queued`` records marked ``parked``, oldest first (``fresh`` changes nothing:
        every write is seen at once here)."""
        with self._lock:
            parked = [r for r in self.jobs.values() if r.parked and r.status == JobStatus.QUEUED]
        return sorted(parked, key=lambda r: (r.created_at, r.job_id))[:limit]

    def unpark_jobs(self, job_ids: Sequence[str]) -> None:
        with self._lock:
            for job_id in job_ids:
                if job_id in self.jobs:
                    self.jobs[job_id] = self.jobs[job_id].model_copy(update={"parked": False})

    def save_jobs(self, records: Sequence[JobRecord]) -> None:
        for record in records:
            self.save_job(record)

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._lock:
            return self.jobs.get(job_id)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord | None]:
        with self._lock:
            return {job_id: self.jobs.get(job_id) for job_id in job_ids}

    def get_memory(self, memory_id: str) -> MemoryRecord | None:
        with self._lock:
            held = self.memories.get(memory_id)
        return None if held is None else MemoryRecord.from_source(memory_id, held)

    def entities_by_name(self, scope: Scope, names: Sequence[str]) -> dict[str, str]:
        """The scope's entities whose normalized text is one of ``names``: name -> entity id."""
        wanted = set(names)
        with self._lock:
            return {
                e["normalized"]: i
                for i, e in self.entities.items()
                if e["normalized"] in wanted and in_scope(e, scope)
            }

    def entity_links(self, scope: Scope, entity_ids: Sequence[str]) -> dict[str, list[str]]:
        """Entity id -> the ids of the memories it is linked to (unknown ids, and entities
        of another scope, left out)."""
        wanted = scope.fields()
        with self._lock:
            return {
                i: list(self.entities[i]["linked_memory_ids"])
                for i in entity_ids
                if i in self.entities
                and all(self.entities[i].get(k) == v for k, v in wanted.items())
            }

    def health(self) -> StoreHealth:
        """Always reachable: it is this process."""
        return StoreHealth(cluster="in-memory", status="green", nodes=1)

    def create_key(self, key_id: str, document: KeyDocument) -> None:
        with self._lock:
            if key_id in self.keys:
                raise PermanentError(f"create an API key: key {key_id} already exists")
            self.keys[key_id] = document.model_dump(mode="json", exclude_none=True)

    def get_key(self, key_id: str) -> KeyDocument | None:
        with self._lock:
            held = self.keys.get(key_id)
            return None if held is None else KeyDocument.model_validate(held)

    def update_key(self, key_id: str, fields: dict[str, Any]) -> bool:
        with self._lock:
            if key_id not in self.keys:
                return False
            self.keys[key_id] = {**self.keys[key_id], **fields}
            return True

    def key_ids(self) -> list[str]:
        with self._lock:
            return list(self.keys)

    def list_keys(self, tenant: str | None = None) -> list[ListedKey]:
        with self._lock:
            held = [
                ListedKey.from_source(key_id, doc).model_copy(update={"secret_sha256": None})
                for key_id, doc in self.keys.items()
                if tenant is None or doc.get("tenant") == tenant
            ]
        return sorted(held, key=lambda key: key.created_at)
