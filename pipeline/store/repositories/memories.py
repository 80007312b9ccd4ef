"""Memories: dedup reads for the phases, their creation (with history rows), replacements,
and the reads and edits that serve the API: by id, pages over a point in time, searches."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from elasticsearch import NotFoundError

from pipeline.domain.models import ExistingMemory, Scope
from pipeline.domain.validity import Change, Closure, Replacement, changes_of, closure_of, merged
from pipeline.errors import TransientError
from pipeline.store.client import es_errors, item_error
from pipeline.store.derived import with_derived
from pipeline.store.indices import Kind
from pipeline.store.protocol import (
    HistoryDoc,
    MemoryDoc,
    SearchIndex,
    StoredHash,
    WriteOutcome,
)
from pipeline.store.queries import still_valid
from pipeline.store.reads import ListedMemory, MemoryRecord
from pipeline.store.repositories.base import Connection, Repository, scope_filter, search_header
from pipeline.store.repositories.history import HistoryRepository
from pipeline.store.routing import scope_routing, search_routing

REPLACE_ATTEMPTS = 20


class MemoryRepository(Repository):
    kind = Kind.MEMORIES

    def __init__(self, connection: Connection, history: HistoryRepository) -> None:
        super().__init__(connection)
        self.history = history  # memories and their rows are created in one bulk
        # monotonic time of the last refresh after a miss, see ``routing_of``
        self._miss_refreshed_at = -connection.miss_refresh_interval_s

    # -- what the phases read and write -----------------------------------------------------

    def similar_memories(
        self, scope: Scope, vector: Sequence[float], k: int
    ) -> list[ExistingMemory]:
        return self.similar_memories_many([(scope, vector)], k)[0]

    def similar_memories_many(
        self,
        queries: Sequence[tuple[Scope, Sequence[float]]],
        k: int,
        valid_at: Sequence[datetime] | None = None,
    ) -> list[list[ExistingMemory]]:
        """For each (scope, vector), the scope's ``k`` nearest memories (with ``valid_at``:
        those not yet replaced at its time): one msearch."""
        searches: list[dict[str, Any]] = []
        times: Sequence[datetime | None] = valid_at or [None] * len(queries)
        for (scope, vector), at in zip(queries, times, strict=True):
            clauses = scope_filter(scope) + ([still_valid(at)] if at else [])
            searches.append(search_header(self.index, scope))
            searches.append(
                {
                    "knn": {
                        "field": "embedding",
                        "query_vector": list(vector),
                        "k": k,
                        "num_candidates": max(100, 10 * k),
                        "filter": clauses,
                    },
                    "size": k,
                    "_source": ["text"],
                }
            )
        return [
            [ExistingMemory(id=h["_id"], text=h["_source"]["text"]) for h in hits]
            for hits in self.connection.msearch_hits(searches, "retrieve similar memories")
        ]

    def hashes_in_scope(self, scope: Scope, hashes: Sequence[str]) -> set[str]:
        return self.hashes_in_scopes([(scope, hashes)])[0]

    def hashes_in_scopes(
        self, queries: Sequence[tuple[Scope, Sequence[str]]], not_of_jobs: Sequence[str] = ()
    ) -> list[set[str]]:
        """For each (scope, hashes), which of the hashes a memory of the scope already has,
        not counting memories written by ``not_of_jobs``: one msearch for all the scopes that
        have hashes to look up."""
        mine = [{"terms": {"job_id": list(not_of_jobs)}}] if not_of_jobs else []
        asked = [(i, scope, list(hashes)) for i, (scope, hashes) in enumerate(queries) if hashes]
        found: list[set[str]] = [set() for _ in queries]
        if not asked:
            return found
        searches: list[dict[str, Any]] = []
        for _, scope, hashes in asked:
            searches.append(search_header(self.index, scope))
            searches.append(
                {
                    "query": {
                        "bool": {
                            "filter": [*scope_filter(scope), {"terms": {"hash": hashes}}],
                            "must_not": mine,
                        }
                    },
                    "size": len(hashes),
                    "_source": ["hash"],
                }
            )
        results = self.connection.msearch_hits(searches, "look up fact hashes")
        for (i, _, _), hits in zip(asked, results, strict=True):
            found[i] = {h["_source"]["hash"] for h in hits}
        return found

    def create_memories(self, docs: Sequence[MemoryDoc]) -> WriteOutcome:
        return self.create_memories_with_history(docs, [])[0]

    def create_memories_with_history(
        self, docs: Sequence[MemoryDoc], rows: Sequence[HistoryDoc], refresh: bool = False
    ) -> tuple[WriteOutcome, WriteOutcome]:
        """Memories and history rows in one bulk create; conflicting memories are read back
        (one mget, only when there are any) to tell our own earlier write from another's.
        ``refresh``: the bulk asks Elasticsearch to refresh the shards it wrote to before it
        answers (no extra request, no wait for the refresh interval), so the memories are
        searchable when this returns."""
        items = {(self.index, d.id, scope_routing(d.scope)): d.source() for d in docs}
        outcomes = self.connection.create_all(items | self.history.creates(rows), refresh)
        memories = outcomes.get(self.index, WriteOutcome())
        if memories.conflicts:
            routings = {d.id: scope_routing(d.scope) for d in docs}
            memories.conflicts = self._stored_hashes({i: routings[i] for i in memories.conflicts})
        return memories, outcomes.get(self.history.index, WriteOutcome())

    def _stored_hashes(self, routings: dict[str, str]) -> dict[str, StoredHash]:
        """The hash and job of each memory id (id -> its routing) that exists."""
        with es_errors("read conflicting memories"):
            docs = self.connection.client.mget(
                index=self.index,
                docs=[{"_id": i, "routing": r} for i, r in routings.items()],
                source_includes=["hash", "job_id"],
            ).body["docs"]
        return {
            d["_id"]: StoredHash(
                hash=d["_source"].get("hash", ""), job_id=d["_source"].get("job_id")
            )
            for d in docs
            if d.get("found")
        }

    def replace_memories(self, replacements: Sequence[Replacement]) -> list[Closure | None]:
        """One mget of the memories the replacements name, then one bulk of updates, each
        guarded by ``if_seq_no``/``if_primary_term`` (the minimal distribution has no
        scripting); memories another writer changed in between are read and merged again, so
        two jobs replacing one memory both land. The bulk refreshes the shards it wrote to (no
        wait for the refresh interval): a job that succeeded shows its replacements."""
        if not replacements:
            return []
        routing = {r.new_id: scope_routing(r.scope) for r in replacements}
        routing |= {r.old_id: scope_routing(r.scope) for r in replacements}
        docs = self._versioned(routing)
        sources = {i: doc["_source"] for i, doc in docs.items()}
        closures = [closure_of(r, sources) for r in replacements]
        pending = changes_of(closures)
        for _ in range(REPLACE_ATTEMPTS):
            pending = self._apply_changes(pending, docs, routing)
            if not pending:
                return closures
            docs = self._versioned({i: routing[i] for i in pending})
        raise TransientError(f"memories {sorted(pending)}: too many concurrent replacements")

    def _versioned(self, routings: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """The found memories among ``routings`` (id -> routing), with their versions."""
        with es_errors("read replaced memories"):
            found = self.connection.client.mget(
                index=self.index,
                docs=[{"_id": i, "routing": r} for i, r in routings.items()],
                source_includes=["text", "observed_at", "valid_until", "replaced_by", "replaces"],
            ).body["docs"]
        return {d["_id"]: d for d in found if d.get("found")}

    def _apply_changes(
        self,
        pending: dict[str, Change],
        docs: Mapping[str, dict[str, Any]],
        routing: Mapping[str, str],
    ) -> dict[str, Change]:
        """Write each memory's change over the version read; the changes whose memory another
        writer changed meanwhile are returned, to be merged again (a memory deleted meanwhile
        is dropped: nothing is left to close)."""
        actions: list[dict[str, Any]] = []
        for memory, change in pending.items():
            doc = docs.get(memory)
            fields = merged(doc["_source"], change) if doc is not None else None
            if doc is None or fields is None:
                continue
            guard = {"if_seq_no": doc["_seq_no"], "if_primary_term": doc["_primary_term"]}
            header = {"_index": self.index, "_id": memory, "routing": routing[memory]}
            actions += [{"update": {**header, **guard}}, {"doc": with_derived(fields)}]
        if not actions:
            return {}
        with es_errors("replace memories"):
            body = self.connection.bulk(operations=actions, refresh=True)
        retry: dict[str, Change] = {}
        for item in body["items"] if body.get("errors") else []:
            result = item["update"]
            if result["status"] == 409:
                retry[result["_id"]] = pending[result["_id"]]
            elif result.get("error") and result["status"] != 404:
                raise item_error("replace memories", result["status"], result["error"])
        return retry

    # -- reads and edits that serve the API, the CLI and search -----------------------------

    def make_visible(self) -> None:
        """Refresh the memories index: what was written is searchable when this returns. For
        the few flows where a reader is known to follow (a caller who waited, a bulk delete)."""
        with es_errors("refresh memories"):
            self.connection.client.indices.refresh(index=self.index)

    def get_memory(self, memory_id: str) -> MemoryRecord | None:
        """A memory, or None.

        A read by id alone does not know the memory's scope, hence its routing: the routing
        is found first (``routing_of``, every shard asked), then the memory is read by a
        realtime get on its shard, so a change made a moment ago (a link, an edit) is seen."""
        routing = self.routing_of(memory_id)
        if routing is None:
            return None
        with es_errors(f"read memory {memory_id}"):
            try:
                body = self.connection.client.get(
                    index=self.index, id=memory_id, routing=routing
                ).body
            except NotFoundError:  # deleted in between
                return None
        return MemoryRecord.from_source(memory_id, body["_source"])

    def routing_of(self, memory_id: str) -> str | None:
        """The routing of a memory known by id alone: a search of every shard on the id (the
        routing of a document never changes). A search sees what the last refresh made
        visible, so a miss refreshes the memories and asks once more: a memory stored a moment
        ago is found. A refresh costs the whole cluster, so a store serving tenants' requests
        (``miss_refresh_interval_s`` > 0, the API's) forces at most one per interval: there a
        flood of unknown ids costs one search each, not a refresh each, and what a caller was
        promised findable (a succeeded job, an edit) has been refreshed already."""
        for attempt in range(2):
            with es_errors(f"find memory {memory_id}"):
                if attempt and not self._refresh_after_miss():
                    return None
                hits = self.connection.client.search(
                    index=self.index,
                    query={"ids": {"values": [memory_id]}},
                    size=1,
                    source=False,
                    track_total_hits=False,
                )["hits"]["hits"]
            if hits:
                routing: str = hits[0]["_routing"]
                return routing
        return None

    def _refresh_after_miss(self) -> bool:
        """Refresh the memories when this process has not done so for a miss within the
        interval; False when it has (the miss stands)."""
        now = time.monotonic()
        if now - self._miss_refreshed_at < self.connection.miss_refresh_interval_s:
            return False
        self._miss_refreshed_at = now
        self.connection.client.indices.refresh(index=self.index)
        return True

    def update_memory(self, memory_id: str, fields: dict[str, Any], scope: Scope) -> None:
        """Change fields of the memory ``memory_id`` of ``scope`` (its routing)."""
        with es_errors(f"update memory {memory_id}"):
            self.connection.client.update(
                index=self.index,
                id=memory_id,
                routing=scope_routing(scope),
                doc=with_derived(fields),
                refresh="wait_for",
            )

    def delete_memories(self, memories: Mapping[str, Scope]) -> set[str]:
        """Delete memories (id -> its scope, for its routing); returns the ids that existed
        and are now gone."""
        if not memories:
            return set()
        actions = [
            {"delete": {"_index": self.index, "_id": i, "routing": scope_routing(s)}}
            for i, s in memories.items()
        ]
        with es_errors("delete memories"):
            items = self.connection.bulk(operations=actions, refresh="wait_for")["items"]
        return {i["delete"]["_id"] for i in items if i["delete"].get("result") == "deleted"}

    def search_memories(
        self,
        bodies: Sequence[dict[str, Any]],
        what: str,
        named: bool = False,
        scopes: Sequence[Scope | None] | None = None,
    ) -> list[dict[str, Any]]:
        """Run each search body over the memories index in one msearch: one full response per
        body, in order. ``scopes`` (one per body) route each to its scope's shard when the
        scope names it. ``named``: hits carry the score of each named query they matched. A
        failed search fails the call (``TransientError``)."""
        searches: list[tuple[SearchIndex, Scope | None, dict[str, Any]]] = [
            ("memories", scope, body)
            for body, scope in zip(bodies, scopes or [None] * len(bodies), strict=True)
        ]
        return self.connection.search_indices(searches, what, named)

    def open_memories_cursor(self, keep_alive: str, scope: Scope | None = None) -> str:
        """A point in time over the memories index (its id), for paging without overlap; over
        the one shard of ``scope`` when the scope names it."""
        with es_errors("open a point in time"):
            routing = search_routing(scope) if scope is not None else None
            return self.connection.open_pit(self.index, routing, keep_alive)

    def close_cursor(self, pit: str) -> None:
        """Give back a point in time; one already gone is not an error."""
        with es_errors("close a point in time"):
            self.connection.close_pit(pit)

    def page(self, body: dict[str, Any]) -> list[ListedMemory] | None:
        """The memories of one search over a point in time (``body`` names it), or None when
        that point in time has expired."""
        with es_errors("list memories"):
            try:
                hits: list[dict[str, Any]] = self.connection.client.search(**body)["hits"]["hits"]
            except NotFoundError:
                return None
        return [ListedMemory.from_hit(hit) for hit in hits]

    def count_memories(self, scope: Scope, where: Sequence[dict[str, Any]] = ()) -> int:
        with es_errors("count memories"):
            count: int = self.connection.client.count(
                index=self.index,
                routing=search_routing(scope),
                query={"bool": {"filter": [*scope_filter(scope), *where]}},
            )["count"]
        return count
