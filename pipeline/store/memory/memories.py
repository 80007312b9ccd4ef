"""Memories and their history rows in memory (``repositories.memories`` and
``repositories.history``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pipeline.domain.models import ExistingMemory, Scope
from pipeline.domain.validity import Closure, Replacement, changes_of, closure_of, merged
from pipeline.store.memory.tables import Tables, cosine, in_scope, still_valid
from pipeline.store.protocol import (
    HistoryDoc,
    MemoryDoc,
    StoredHash,
    WriteOutcome,
)
from pipeline.store.reads import MemoryRecord


class MemoriesInMemory(Tables):
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

    def hashes_in_scopes(
        self, queries: Sequence[tuple[Scope, Sequence[str]]], not_of_jobs: Sequence[str] = ()
    ) -> list[set[str]]:
        return [self._hashes(scope, hashes, set(not_of_jobs)) for scope, hashes in queries]

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

    def create_memories_with_history(
        self, docs: Sequence[MemoryDoc], rows: Sequence[HistoryDoc], refresh: bool = False
    ) -> tuple[WriteOutcome, WriteOutcome]:
        return self.create_memories(docs), self.write_history(rows)

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

    def delete_history(self, rows: Sequence[HistoryDoc]) -> None:
        with self._lock:
            for row in rows:
                self.history.pop(row.id, None)

    def replace_memories(self, replacements: Sequence[Replacement]) -> list[Closure | None]:
        """The same merge as ``ElasticStore``'s, under the store's lock."""
        with self._lock:
            closures = [closure_of(r, self.memories) for r in replacements]
            for memory, change in changes_of(closures).items():
                fields = merged(self.memories[memory], change)
                self.memories[memory].update(fields or {})
        return closures

    def get_memory(self, memory_id: str) -> MemoryRecord | None:
        with self._lock:
            held = self.memories.get(memory_id)
        return None if held is None else MemoryRecord.from_source(memory_id, held)
