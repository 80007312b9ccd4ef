"""``ElasticStore``: the ``Store`` protocol over Elasticsearch.

Writes use deterministic ids with ``op_type=create``, so a replayed write meets itself as a
conflict instead of a duplicate. Links between entities and memories are updated with optimistic
concurrency (``if_seq_no``/``if_primary_term``) because the minimal distribution has no scripting.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from elasticsearch import Elasticsearch, NotFoundError

from pipeline.config import ElasticsearchConfig
from pipeline.errors import EmbedderChangedError, TransientError
from pipeline.filters import with_substrings
from pipeline.health import elasticsearch_health
from pipeline.jobs import JobRecord, JobStatus
from pipeline.models import NAMESPACE, ContextMessage, ExistingMemory, Scope, message_id
from pipeline.store.client import error_reason, es_errors, item_error, other_dims
from pipeline.store.indices import IndexNames, Kind, ensure_indices, stored_embedder
from pipeline.store.protocol import (
    EntityDoc,
    EntityLink,
    HistoryDoc,
    MemoryDoc,
    SearchIndex,
    SessionMessages,
    StoredHash,
    WriteOutcome,
)
from pipeline.store.queries import entities_named_body, nearest_entity_body, still_valid
from pipeline.store.reprocess import Version, versions_of
from pipeline.store.routing import (
    history_routing,
    scope_routing,
    search_routing,
)
from pipeline.validity import Change, Closure, Replacement, changes_of, closure_of, merged

log = logging.getLogger("memq.store")

STATUS_AGGREGATION = {"status": {"terms": {"field": "status", "size": 10}}}

_BULK_ITEM_RETRIES = 3
WINDOW_KEEP = 50  # messages kept in a session's window document (phases read the last 10)
_LINK_ATTEMPTS = 20
KEYS_LISTED_MAX = 1000


def scope_filter(scope: Scope) -> list[dict[str, Any]]:
    """Term filters selecting exactly the documents of ``scope``."""
    return [{"term": {field: value}} for field, value in scope.fields().items()]


def jobs_query(
    tenant: str | None, batch_id: str | None, user_id: str | None = None
) -> dict[str, Any]:
    """The job records of ``tenant``, ``batch_id`` and ``user_id`` (any left out: any)."""
    terms = {"tenant": tenant, "batch_id": batch_id, "user_id": user_id}
    clauses = [{"term": {k: v}} for k, v in terms.items() if v is not None]
    return {"bool": {"filter": clauses}}


def hit_address(hit: Mapping[str, Any]) -> dict[str, Any]:
    """Where a search hit lives: its index, id and routing (when it has one)."""
    address = {"_index": hit["_index"], "_id": hit["_id"]}
    return address | ({"routing": hit["_routing"]} if "_routing" in hit else {})


def window_id(scope: Scope) -> str:
    return str(uuid.uuid5(NAMESPACE, f"window\x1f{scope.key}"))


def cosine_from_score(score: float) -> float:
    """Elasticsearch reports cosine similarity as (1 + cos) / 2; undo that."""
    return 2.0 * score - 1.0


class ElasticStore:
    """The real store. ``refresh`` is "wait_for" only where a read follows in the same flow;
    the writes a job's ``succeeded`` promises findable refresh the shards they touched."""

    def __init__(
        self, client: Elasticsearch, names: IndexNames, miss_refresh_interval_s: float = 0.0
    ) -> None:
        self.client = client
        self.names = names
        self.miss_refresh_interval_s = miss_refresh_interval_s  # see ``_routing_of``
        self._miss_refreshed_at = -miss_refresh_interval_s  # monotonic time of the last one

    def recent_messages(self, scope: Scope, limit: int) -> list[ContextMessage]:
        return self.recent_messages_many([scope], limit)[0]

    def recent_messages_many(
        self, scopes: Sequence[Scope], limit: int
    ) -> list[list[ContextMessage]]:
        """Each scope's window document, read by id in one mget: realtime, so the session's
        previous job is always seen, with no index refresh to wait for."""
        return [
            [ContextMessage.model_validate(e["message"]) for e in window[-limit:]]
            for window in self._windows(scopes)
        ]

    def append_messages(
        self, scope: Scope, job_id: str, messages: Sequence[ContextMessage], at: datetime
    ) -> None:
        self.finish_jobs([SessionMessages(scope, job_id, list(messages), at)], [])

    def finish_jobs(self, entries: Sequence[SessionMessages], records: Sequence[JobRecord]) -> None:
        """One read of the windows, then one bulk: one document per message (the full record),
        each window document extended with its job's messages (replaying a job does not append
        them twice), and the job records. Jobs of one session run one at a time, so a window's
        read-modify-write has no rival."""
        entries = [entry for entry in entries if entry.messages]
        actions: list[dict[str, Any]] = []
        windows = self._windows([entry.scope for entry in entries]) if entries else []
        for entry, window in zip(entries, windows, strict=True):
            actions += self._message_actions(entry, window)
        for record in records:
            actions.append({"index": {"_index": self.names.jobs, "_id": record.job_id}})
            actions.append(record.model_dump(mode="json"))
        if actions:
            self._bulk_all_or_raise(actions, "save messages and job records")

    def save_jobs(self, records: Sequence[JobRecord]) -> None:
        """Write several job records in one bulk."""
        actions: list[dict[str, Any]] = []
        for record in records:
            actions.append({"index": {"_index": self.names.jobs, "_id": record.job_id}})
            actions.append(record.model_dump(mode="json"))
        if actions:
            self._bulk_all_or_raise(actions, "save job records")

    def _message_actions(
        self, entry: SessionMessages, window: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        scope, job_id, at = entry.scope, entry.job_id, entry.at
        routing = scope_routing(scope)
        actions: list[dict[str, Any]] = []
        for seq, message in enumerate(entry.messages):
            actions.append(
                {
                    "index": {
                        "_index": self.names.messages,
                        "_id": message_id(job_id, seq),
                        "routing": routing,
                    }
                }
            )
            actions.append(
                {
                    **scope.fields(),
                    "kind": "message",
                    "session_key": scope.key,
                    "job_id": job_id,
                    "seq": seq,
                    "role": message.role,
                    "name": message.name,
                    "content": message.content,
                    "created_at": at.isoformat(),
                }
            )
        if any(item["job_id"] == job_id for item in window):
            return actions
        window = window + [
            {"job_id": job_id, "seq": seq, "message": m.model_dump()}
            for seq, m in enumerate(entry.messages)
        ]
        actions.append(
            {"index": {"_index": self.names.messages, "_id": window_id(scope), "routing": routing}}
        )
        actions.append(
            {
                **scope.fields(),
                "kind": "window",
                "session_key": scope.key,
                "job_id": job_id,
                "window": window[-WINDOW_KEEP:],
                "created_at": at.isoformat(),
            }
        )
        return actions

    def _windows(self, scopes: Sequence[Scope]) -> list[list[dict[str, Any]]]:
        if not scopes:
            return []
        with es_errors("read the message windows"):
            docs = self.client.mget(
                index=self.names.messages,
                docs=[{"_id": window_id(s), "routing": scope_routing(s)} for s in scopes],
                source_includes=["window"],
            ).body["docs"]
        return [d["_source"].get("window", []) if d.get("found") else [] for d in docs]

    def get_messages(self, ids: Sequence[str], routing: str) -> dict[str, dict[str, Any]]:
        """The stored messages among ``ids`` (all on the shard of ``routing``, their scope's):
        id -> source, in one realtime mget; an id with no message (erased) is left out."""
        if not ids:
            return {}
        with es_errors("read messages"):
            docs = self.client.mget(index=self.names.messages, ids=list(ids), routing=routing).body[
                "docs"
            ]
        return {d["_id"]: d["_source"] for d in docs if d.get("found")}

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
            searches.append(self._header(self.names.memories, scope))
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
            for hits in self._msearch(searches, "retrieve similar memories")
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
            searches.append(self._header(self.names.memories, scope))
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
        results = self._msearch(searches, "look up fact hashes")
        for (i, _, _), hits in zip(asked, results, strict=True):
            found[i] = {h["_source"]["hash"] for h in hits}
        return found

    @staticmethod
    def _header(index: str, scope: Scope | None) -> dict[str, Any]:
        """An msearch header for a read of ``scope``: its one shard when the scope names it
        (``search_routing``), every shard otherwise."""
        routing = search_routing(scope) if scope is not None else None
        return {"index": index} | ({"routing": routing} if routing else {})

    def _msearch(self, searches: list[dict[str, Any]], what: str) -> list[list[dict[str, Any]]]:
        """The hits of each search; any search that failed fails the call (the batch then
        falls back to one call per job, which isolates the failing one). So does a search that
        did not hear from every shard: a dedup or an entity lookup that missed one could
        miss a duplicate, so the phase is retried rather than run on half an answer."""
        if not searches:
            return []
        with es_errors(what):
            responses = self.client.msearch(searches=searches).body["responses"]
        for response in responses:
            if "error" in response:
                raise item_error(what, response.get("status"), response["error"])
            shards = response.get("_shards", {})
            if shards.get("failed") or response.get("timed_out"):
                reason = error_reason((shards.get("failures") or [{}])[0].get("reason", ""))
                raise TransientError(
                    f"{what}: {shards.get('failed', 0)} of {shards.get('total', 0)} shards "
                    f"failed or timed out ({reason})"
                )
        return [response["hits"]["hits"] for response in responses]

    def create_memories(self, docs: Sequence[MemoryDoc]) -> WriteOutcome:
        return self.create_memories_with_history(docs, [])[0]

    def write_history(self, rows: Sequence[HistoryDoc]) -> WriteOutcome:
        return self.create_memories_with_history([], rows)[1]

    def create_memories_with_history(
        self, docs: Sequence[MemoryDoc], rows: Sequence[HistoryDoc], refresh: bool = False
    ) -> tuple[WriteOutcome, WriteOutcome]:
        """Memories and history rows in one bulk create; conflicting memories are read back
        (one mget, only when there are any) to tell our own earlier write from another's.
        ``refresh``: the bulk asks Elasticsearch to refresh the shards it wrote to before it
        answers (no extra request, no wait for the refresh interval), so the memories are
        searchable when this returns."""
        items = {(self.names.memories, d.id, scope_routing(d.scope)): d.source() for d in docs}
        items |= {
            (self.names.history, r.id, history_routing(r.memory_id, r.id)): r.source() for r in rows
        }
        outcomes = self._create_all(items, refresh)
        memories = outcomes[self.names.memories]
        if memories.conflicts:
            routings = {d.id: scope_routing(d.scope) for d in docs}
            memories.conflicts = self._stored_hashes({i: routings[i] for i in memories.conflicts})
        return memories, outcomes[self.names.history]

    def delete_history(self, rows: Sequence[HistoryDoc]) -> None:
        """Remove history rows (written for memories that turned out not to be stored)."""
        actions = [
            {
                "delete": {
                    "_index": self.names.history,
                    "_id": r.id,
                    "routing": history_routing(r.memory_id, r.id),
                }
            }
            for r in rows
        ]
        if actions:
            with es_errors("delete history rows"):
                self._bulk(operations=actions)

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
        for _ in range(_LINK_ATTEMPTS):
            pending = self._apply_changes(pending, docs, routing)
            if not pending:
                return closures
            docs = self._versioned({i: routing[i] for i in pending})
        raise TransientError(f"memories {sorted(pending)}: too many concurrent replacements")

    def _versioned(self, routings: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """The found memories among ``routings`` (id -> routing), with their versions."""
        with es_errors("read replaced memories"):
            found = self.client.mget(
                index=self.names.memories,
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
            header = {"_index": self.names.memories, "_id": memory, "routing": routing[memory]}
            actions += [{"update": {**header, **guard}}, {"doc": with_substrings(fields)}]
        if not actions:
            return {}
        with es_errors("replace memories"):
            body = self._bulk(operations=actions, refresh=True)
        retry: dict[str, Change] = {}
        for item in body["items"] if body.get("errors") else []:
            result = item["update"]
            if result["status"] == 409:
                retry[result["_id"]] = pending[result["_id"]]
            elif result.get("error") and result["status"] != 404:
                raise item_error("replace memories", result["status"], result["error"])
        return retry

    def nearest_entities(
        self, scope: Scope, vectors: Sequence[Sequence[float]]
    ) -> list[tuple[str, float] | None]:
        return self.nearest_entities_many([(scope, vector) for vector in vectors])

    def nearest_entities_many(
        self, queries: Sequence[tuple[Scope, Sequence[float]]]
    ) -> list[tuple[str, float] | None]:
        """For each (scope, vector), the scope's most similar entity and its cosine: one
        msearch."""
        searches: list[dict[str, Any]] = []
        for scope, vector in queries:
            searches.append(self._header(self.names.entities, scope))
            searches.append(nearest_entity_body(vector, scope_filter(scope)))
        return [
            (hits[0]["_id"], cosine_from_score(hits[0]["_score"])) if hits else None
            for hits in self._msearch(searches, "search similar entities")
        ]

    def link_entities(
        self, links: Sequence[EntityLink], update_memories: bool = True, refresh: bool = False
    ) -> None:
        """One mget of the target entities, then one bulk: creates for the missing, updates
        guarded by ``if_seq_no`` for the rest, and (``update_memories``) each memory's
        ``entity_ids``. Targets that another writer changed in between are read and written
        again. A target that is gone (merged into, then deleted since the search) is created
        again under its id, since memories may name it already. ``refresh``: as for
        ``create_memories_with_history``, on the shards this bulk wrote to."""
        wanted: dict[str, set[str]] = {}
        creatable: dict[str, EntityDoc] = {}
        memories: dict[str, set[str]] = {}
        # an entity, its memories and the entity it merges into share one scope, so one routing
        routing: dict[str, str] = {}
        for link in links:
            wanted.setdefault(link.target, set()).update(link.memory_ids)
            if link.target == link.entity.id:
                creatable[link.target] = link.entity
            else:
                creatable.setdefault(link.target, replace(link.entity, id=link.target))
            for memory in link.memory_ids:
                memories.setdefault(memory, set()).add(link.target)
                routing[memory] = scope_routing(link.entity.scope)
            routing[link.target] = scope_routing(link.entity.scope)
        extra: list[dict[str, Any]] = []
        if update_memories:
            for memory, targets in memories.items():
                header = {"_index": self.names.memories, "_id": memory, "routing": routing[memory]}
                extra.append({"update": {**header, "retry_on_conflict": 3}})
                extra.append({"doc": with_substrings({"entity_ids": sorted(targets)})})
        for _ in range(_LINK_ATTEMPTS):
            actions = self._entity_link_actions(wanted, creatable, routing) + extra
            if not actions:
                return
            conflicted = self._bulk_all_or_raise(
                actions, "link entities", frozenset(wanted), refresh
            )
            wanted = {target: ids for target, ids in wanted.items() if target in conflicted}
            extra = []
        raise TransientError(f"entities {sorted(wanted)}: too many concurrent link updates")

    def entities_by_name(self, scope: Scope, names: Sequence[str]) -> dict[str, str]:
        """The scope's entities whose normalized text is one of ``names``: name -> entity id."""
        if not names:
            return {}
        body = entities_named_body(names, scope_filter(scope))
        [response] = self.search_indices([("entities", scope, body)], "look up entities by name")
        return {h["_source"]["normalized"]: h["_id"] for h in response["hits"]["hits"]}

    def entity_links(self, scope: Scope, entity_ids: Sequence[str]) -> dict[str, list[str]]:
        """Entity id -> the ids of the memories it is linked to, for entities of ``scope``
        (found by a search of it). A scope that names its user names their shard: a realtime
        mget there. Otherwise the entities may sit on any shard: a search of every one."""
        if not entity_ids:
            return {}
        routing = search_routing(scope)
        if routing is not None:
            with es_errors("read entity links"):
                docs = self.client.mget(
                    index=self.names.entities,
                    ids=list(entity_ids),
                    routing=routing,
                    source_includes=["linked_memory_ids"],
                ).body["docs"]
            return {
                d["_id"]: d["_source"].get("linked_memory_ids", []) for d in docs if d.get("found")
            }
        with es_errors("read entity links"):
            hits = self.client.search(
                index=self.names.entities,
                query={"ids": {"values": list(entity_ids)}},
                size=len(entity_ids),
                source_includes=["linked_memory_ids"],
                track_total_hits=False,
            )["hits"]["hits"]
        return {h["_id"]: h["_source"].get("linked_memory_ids", []) for h in hits}

    def entities_of(self, scope: Scope, entity_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The entities ``entity_ids`` of ``scope`` (``{"id", "text", "type"}``), one round
        trip on the scope's shard; ids that are gone are left out."""
        if not entity_ids:
            return []
        with es_errors("read entities"):
            docs = self.client.mget(
                index=self.names.entities,
                ids=list(entity_ids),
                routing=scope_routing(scope),
                source_includes=["text", "type", "tenant"],
            ).body["docs"]
        found = [{"id": d["_id"], **d["_source"]} for d in docs if d.get("found")]
        return [e for e in found if e.get("tenant") == scope.tenant]

    def make_visible(self) -> None:
        """Refresh the memories index: what was written is searchable when this returns. For
        the few flows where a reader is known to follow (a caller who waited, a bulk delete)."""
        with es_errors("refresh memories"):
            self.client.indices.refresh(index=self.names.memories)

    def get_memory(self, memory_id: str) -> dict[str, Any] | None:
        """A memory's source (without its vector), or None.

        A read by id alone does not know the memory's scope, hence its routing: the routing
        is found first (``_routing_of``, every shard asked), then the memory is read by a
        realtime get on its shard, so a change made a moment ago (a link, an edit) is seen."""
        routing = self._routing_of(memory_id)
        if routing is None:
            return None
        with es_errors(f"read memory {memory_id}"):
            try:
                body = self.client.get(
                    index=self.names.memories, id=memory_id, routing=routing
                ).body
            except NotFoundError:  # deleted in between
                return None
        source: dict[str, Any] = body["_source"]
        source.pop("embedding", None)
        return source

    def _routing_of(self, memory_id: str) -> str | None:
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
                hits = self.client.search(
                    index=self.names.memories,
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
        if now - self._miss_refreshed_at < self.miss_refresh_interval_s:
            return False
        self._miss_refreshed_at = now
        self.client.indices.refresh(index=self.names.memories)
        return True

    def update_memory(self, memory_id: str, fields: dict[str, Any], scope: Scope) -> None:
        """Change fields of the memory ``memory_id`` of ``scope`` (its routing)."""
        with es_errors(f"update memory {memory_id}"):
            self.client.update(
                index=self.names.memories,
                id=memory_id,
                routing=scope_routing(scope),
                doc=with_substrings(fields),
                refresh="wait_for",
            )

    def memory_history(self, memory_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        """History rows of a memory, oldest first."""
        with es_errors(f"read the history of {memory_id}"):
            self.client.indices.refresh(index=self.names.history)  # rows written a moment ago
            body = self.client.search(
                index=self.names.history,
                routing=memory_id,  # history_routing: a memory's rows live together
                query={"term": {"memory_id": memory_id}},
                sort=[{"created_at": "asc"}],
                size=limit,
            ).body
        return [{"id": h["_id"], **h["_source"]} for h in body["hits"]["hits"]]

    def delete_memories(self, memories: Mapping[str, Scope]) -> set[str]:
        """Delete memories (id -> its scope, for its routing); returns the ids that existed
        and are now gone."""
        if not memories:
            return set()
        actions = [
            {"delete": {"_index": self.names.memories, "_id": i, "routing": scope_routing(s)}}
            for i, s in memories.items()
        ]
        with es_errors("delete memories"):
            items = self._bulk(operations=actions, refresh="wait_for")["items"]
        return {i["delete"]["_id"] for i in items if i["delete"].get("result") == "deleted"}

    def delete_matching(self, index: str, query: dict[str, Any], routing: str | None = None) -> int:
        """Delete every document of ``index`` matching ``query``, page by page from one point
        in time (the minimal distribution has no delete-by-query); returns how many. With a
        ``routing`` only its shard is read; each hit is deleted under its own routing."""
        deleted = 0
        with es_errors(f"delete from {index}"):
            self.client.indices.refresh(index=index)
            pit = self.client.open_point_in_time(index=index, keep_alive="1m", routing=routing)[
                "id"
            ]
            try:
                for hits in self._pages(pit, query):
                    ops = [{"delete": hit_address(h)} for h in hits]
                    items = self._bulk(operations=ops)["items"]
                    deleted += sum(1 for i in items if i["delete"].get("result") == "deleted")
            finally:
                self.client.options(ignore_status=404).close_point_in_time(id=pit)
            self.client.indices.refresh(index=index)
        return deleted

    def matching_sources(
        self, index: str, query: dict[str, Any], fields: Sequence[str], routing: str | None = None
    ) -> list[dict[str, Any]]:
        """``fields`` of every document of ``index`` matching ``query`` (on the shard of
        ``routing`` only, when given)."""
        return [h.get("_source", {}) for h in self._matching(index, query, fields, routing)]

    def matching_ids(
        self, index: str, query: dict[str, Any], routing: str | None = None
    ) -> list[str]:
        """The ids of every document of ``index`` matching ``query``."""
        return [str(h["_id"]) for h in self._matching(index, query, (), routing)]

    def _matching(
        self, index: str, query: dict[str, Any], fields: Sequence[str], routing: str | None
    ) -> list[dict[str, Any]]:
        with es_errors(f"read from {index}"):
            self.client.indices.refresh(index=index)
            pit = self.client.open_point_in_time(index=index, keep_alive="1m", routing=routing)[
                "id"
            ]
            try:
                return [h for hits in self._pages(pit, query, list(fields)) for h in hits]
            finally:
                self.client.options(ignore_status=404).close_point_in_time(id=pit)

    def _pages(
        self, pit: str, query: dict[str, Any], fields: list[str] | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": 1000,
                "query": query,
                "sort": [{"_shard_doc": "asc"}],
                "pit": {"id": pit, "keep_alive": "1m"},
                "_source": {"includes": fields} if fields else False,
                "track_total_hits": False,
            }
            if after is not None:
                body["search_after"] = after
            hits: list[dict[str, Any]] = self.client.search(**body)["hits"]["hits"]
            if not hits:
                return
            yield hits
            after = hits[-1]["sort"]

    def save_job(self, record: JobRecord) -> None:
        with es_errors(f"save job {record.job_id}"):
            self.client.index(
                index=self.names.jobs,
                id=record.job_id,
                document=record.model_dump(mode="json"),
            )

    def create_job(self, record: JobRecord) -> JobRecord | None:
        """Write ``record`` unless the job has a record already, and return that one (None
        when this call wrote it): one request, an upsert that leaves an existing record as it
        is (a no-op) and answers with the record it found."""
        with es_errors(f"create job {record.job_id}"):
            reply = self.client.update(
                index=self.names.jobs,
                id=record.job_id,
                doc={},
                upsert=record.model_dump(mode="json"),
                source=True,
                retry_on_conflict=3,  # two intakes of one job at once: the second finds it
            ).body
        if reply["result"] == "created":
            return None
        return JobRecord.model_validate(reply["get"]["_source"])

    def parked_jobs(self, limit: int, fresh: bool = False) -> list[JobRecord]:
        """Jobs accepted while Redis was down and not yet in their session's lines: ``queued``
        records marked ``parked``, oldest first. ``fresh``: refresh the jobs index first, so a
        record written a moment ago is seen (a search sees only refreshed documents)."""
        query = {
            "bool": {
                "filter": [
                    {"term": {"parked": True}},
                    {"term": {"status": JobStatus.QUEUED.value}},
                ]
            }
        }
        with es_errors("list parked jobs"):
            if fresh:
                self.client.indices.refresh(index=self.names.jobs)
            hits = self.client.search(
                index=self.names.jobs,
                query=query,
                sort=[{"created_at": "asc"}, {"job_id": "asc"}],
                size=limit,
            ).body["hits"]["hits"]
        return [JobRecord.model_validate(hit["_source"]) for hit in hits]

    def unpark_jobs(self, job_ids: Sequence[str]) -> None:
        """Clear ``parked`` on these records (their jobs joined their lines). A record the
        workers rewrote meanwhile is rewritten unparked anyway; a missing one is skipped."""
        actions: list[dict[str, Any]] = []
        for job_id in job_ids:
            actions.append({"update": {"_index": self.names.jobs, "_id": job_id}})
            actions.append({"doc": {"parked": False}})
        if not actions:
            return
        with es_errors("unpark jobs"):
            body = self._bulk(operations=actions)
        for item in body["items"] if body.get("errors") else []:
            result = item["update"]
            if result.get("error") and result["status"] != 404:
                raise TransientError(f"unpark jobs: {error_reason(result['error'])}")

    def search_jobs(self, body: dict[str, Any]) -> list[tuple[JobRecord, list[Any]]]:
        """The jobs a listing's search body finds, each with its sort values."""
        with es_errors("list jobs"):
            hits = self.client.search(index=self.names.jobs, **body).body["hits"]["hits"]
        return [(JobRecord.model_validate(hit["_source"]), hit["sort"]) for hit in hits]

    def get_job(self, job_id: str) -> JobRecord | None:
        with es_errors(f"read job {job_id}"):
            try:
                body = self.client.get(index=self.names.jobs, id=job_id).body
            except NotFoundError:
                return None
        return JobRecord.model_validate(body["_source"])

    # -- reads that serve the API, the CLI and search -----------------------------------

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
        return self.search_indices(
            [
                ("memories", scope, body)
                for body, scope in zip(bodies, scopes or [None] * len(bodies), strict=True)
            ],
            what,
            named,
        )

    def search_indices(
        self,
        searches_by_index: Sequence[tuple[SearchIndex, Scope | None, dict[str, Any]]],
        what: str,
        named: bool = False,
    ) -> list[dict[str, Any]]:
        """``search_memories`` over any of the indices: (index, scope, body) each, one full
        response per search in one msearch, in order."""
        searches: list[dict[str, Any]] = []
        for kind, scope, body in searches_by_index:
            searches += [self._header(self.names.alias(Kind(kind)), scope), body]
        with es_errors(what):
            responses: list[dict[str, Any]] = self.client.msearch(
                searches=searches, include_named_queries_score=named or None
            ).body["responses"]
        for response in responses:
            if "error" in response:
                reason = f"{what}: {error_reason(response['error'])}"
                if other_dims(response["error"]):  # the index moved to another embedder
                    raise EmbedderChangedError(reason)
                raise TransientError(reason)
        return responses

    def open_memories_cursor(self, keep_alive: str, scope: Scope | None = None) -> str:
        """A point in time over the memories index (its id), for paging without overlap; over
        the one shard of ``scope`` when the scope names it."""
        with es_errors("open a point in time"):
            pit: str = self.client.open_point_in_time(
                index=self.names.memories,
                keep_alive=keep_alive,
                routing=search_routing(scope) if scope is not None else None,
            )["id"]
        return pit

    def close_cursor(self, pit: str) -> None:
        """Give back a point in time; one already gone is not an error."""
        with es_errors("close a point in time"):
            self.client.options(ignore_status=404).close_point_in_time(id=pit)

    def page(self, body: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The hits of one search over a point in time (``body`` names it), or None when that
        point in time has expired."""
        with es_errors("list memories"):
            try:
                hits: list[dict[str, Any]] = self.client.search(**body)["hits"]["hits"]
            except NotFoundError:
                return None
        return hits

    def count_memories(self, scope: Scope, where: Sequence[dict[str, Any]] = ()) -> int:
        with es_errors("count memories"):
            count: int = self.client.count(
                index=self.names.memories,
                routing=search_routing(scope),
                query={"bool": {"filter": [*scope_filter(scope), *where]}},
            )["count"]
        return count

    def job_counts(
        self, tenant: str | None = None, batch_id: str | None = None, user_id: str | None = None
    ) -> dict[str, int]:
        """How many jobs are in each status: all of them, or a tenant's (batch's, user's).
        Counted on the searchable records (near real time: ``refresh_jobs`` first to count a
        job just saved)."""
        query = jobs_query(tenant, batch_id, user_id)
        with es_errors("count jobs by status"):
            body = self.client.search(
                index=self.names.jobs, size=0, query=query, aggs=STATUS_AGGREGATION
            ).body
        return {b["key"]: b["doc_count"] for b in body["aggregations"]["status"]["buckets"]}

    def jobs_in_status(self, status: str, limit: int) -> list[dict[str, Any]]:
        """The latest ``limit`` jobs in ``status``: their id, reason and last update."""
        with es_errors(f"list {status} jobs"):
            body = self.client.search(
                index=self.names.jobs,
                size=limit,
                query={"term": {"status": status}},
                sort=[{"updated_at": "desc"}],
                source_includes=["job_id", "reason", "updated_at"],
            ).body
        return [h["_source"] for h in body["hits"]["hits"]]

    def refresh_jobs(self) -> None:
        """Make every saved job record searchable now."""
        with es_errors("refresh jobs"):
            self.client.indices.refresh(index=self.names.jobs)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord | None]:
        """The record of each job (None when there is none), one round trip."""
        if not job_ids:
            return {}
        with es_errors("read jobs"):
            docs = self.client.mget(index=self.names.jobs, ids=list(job_ids)).body["docs"]
        return {
            d["_id"]: JobRecord.model_validate(d["_source"]) if d.get("found") else None
            for d in docs
        }

    def health(self) -> dict[str, Any]:
        return elasticsearch_health(self.client)

    # -- API keys ------------------------------------------------------------------------

    def create_key(self, key_id: str, document: dict[str, Any]) -> None:
        with es_errors("create an API key"):
            self.client.create(
                index=self.names.keys, id=key_id, document=document, refresh="wait_for"
            )

    def get_key(self, key_id: str) -> dict[str, Any] | None:
        with es_errors("read an API key"):
            try:
                source: dict[str, Any] = self.client.get(index=self.names.keys, id=key_id).body[
                    "_source"
                ]
            except NotFoundError:
                return None
        return source

    def update_key(self, key_id: str, fields: dict[str, Any]) -> bool:
        with es_errors("update an API key"):
            try:
                self.client.update(index=self.names.keys, id=key_id, doc=fields, refresh="wait_for")
            except NotFoundError:
                return False
        return True

    def list_keys(self, tenant: str | None = None) -> list[dict[str, Any]]:
        query = {"term": {"tenant": tenant}} if tenant else {"match_all": {}}
        with es_errors("list API keys"):
            hits = self.client.search(
                index=self.names.keys,
                query=query,
                size=KEYS_LISTED_MAX,
                sort=[{"created_at": "asc"}],
                source_excludes=["secret_sha256"],
            ).body["hits"]["hits"]
        return [{"id": h["_id"], **h["_source"]} for h in hits]

    def key_ids(self) -> list[str]:
        return self.matching_ids(self.names.keys, {"match_all": {}})

    def embedder_meta(self) -> dict[str, Any] | None:
        """The embedder the memories index in use names (``_meta.embedder``), or None."""
        return stored_embedder(self.client, self.names.memories)

    def index_versions(self) -> dict[Kind, list[Version]]:
        """Every index version of the memories and entities (``pipeline.store.reprocess``)."""
        return versions_of(self.client, self.names)

    def reset(self, config: ElasticsearchConfig, dims: int) -> None:
        """Delete every index but the keys', and create them again, empty."""
        with es_errors("reset indices"):
            for kind in Kind:
                if kind is not Kind.KEYS:  # every index behind the alias (a reindex renames)
                    found = self.client.options(ignore_status=404).indices.get_alias(
                        name=self.names.alias(kind)
                    )
                    concrete = [i for i in found.body if i not in {"error", "status"}]
                    if concrete:
                        self.client.indices.delete(index=",".join(concrete))
        ensure_indices(self.client, config, dims)

    # -- internals -------------------------------------------------------------------------

    def _bulk(self, **kwargs: Any) -> dict[str, Any]:
        """A bulk request whose items refused by an index block (a reindex pausing writes
        for its catch-up, see ``pipeline.store.reindex``) fail the whole call as transient:
        the caller's retry writes them once the block is lifted, instead of reporting them
        lost item by item."""
        body: dict[str, Any] = self.client.bulk(**kwargs).body
        if body.get("errors"):
            for item in body["items"]:
                error = next(iter(item.values())).get("error") or {}
                if isinstance(error, dict) and error.get("type") == "cluster_block_exception":
                    raise TransientError(f"bulk write: {error_reason(error)}")
                if other_dims(error):  # the index moved to another embedder meanwhile
                    raise EmbedderChangedError(f"bulk write: {error_reason(error)}")
        return body

    def _create_all(
        self, items: dict[tuple[str, str, str], dict[str, Any]], refresh: bool = False
    ) -> dict[str, WriteOutcome]:
        """Bulk-create ``items`` ((index, id, routing) -> source); items rejected with 429 are
        retried, item by item. One outcome per index."""
        outcomes: dict[str, WriteOutcome] = {index: WriteOutcome() for index, _, _ in items}
        outcomes.setdefault(self.names.memories, WriteOutcome())
        outcomes.setdefault(self.names.history, WriteOutcome())
        pending = dict(items)
        for attempt in range(_BULK_ITEM_RETRIES + 1):
            if not pending:
                break
            if attempt:
                time.sleep(0.2 * 2**attempt)
            last = attempt == _BULK_ITEM_RETRIES
            pending = self._create_round(pending, outcomes, last, refresh)
        return outcomes

    def _create_round(
        self,
        pending: dict[tuple[str, str, str], dict[str, Any]],
        outcomes: dict[str, WriteOutcome],
        last: bool,
        refresh: bool,
    ) -> dict[tuple[str, str, str], dict[str, Any]]:
        actions: list[dict[str, Any]] = []
        for (index, doc_id, routing), source in pending.items():
            actions.append({"create": {"_index": index, "_id": doc_id, "routing": routing}})
            actions.append(source)
        with es_errors("bulk create"):
            items = self._bulk(operations=actions, refresh=refresh)["items"]
        retry: dict[tuple[str, str, str], dict[str, Any]] = {}
        for (key, source), item in zip(pending.items(), items, strict=True):
            result, outcome = item["create"], outcomes[key[0]]
            status, doc_id = result["status"], key[1]
            if status in (200, 201):
                outcome.created.append(doc_id)
            elif status == 409:
                outcome.conflicts[doc_id] = StoredHash(hash="", job_id=None)
            elif status == 429 and not last:
                retry[key] = source
            else:
                outcome.failed[doc_id] = f"HTTP {status} {error_reason(result.get('error'))}"
        return retry

    def _stored_hashes(self, routings: dict[str, str]) -> dict[str, StoredHash]:
        """The hash and job of each memory id (id -> its routing) that exists."""
        with es_errors("read conflicting memories"):
            docs = self.client.mget(
                index=self.names.memories,
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

    def _bulk_all_or_raise(
        self,
        actions: list[dict[str, Any]],
        what: str,
        may_conflict: frozenset[str] = frozenset(),
        refresh: bool = False,
    ) -> set[str]:
        """Run a bulk whose every item must succeed, except that ids in ``may_conflict`` may
        meet a version conflict (409): those are returned. Any other item error raises: a
        conflict, or a status worth retrying, as ``TransientError``; a refusal that will not
        pass (a document the mapping rejects, a memory deleted meanwhile) as ``PermanentError``,
        so its job fails at once with the reason instead of retrying until its deadline."""
        with es_errors(what):
            body = self._bulk(operations=actions, refresh=refresh)
        conflicted: set[str] = set()
        if not body.get("errors"):
            return conflicted
        for item in body["items"]:
            result = next(iter(item.values()))
            if result["status"] == 409 and result["_id"] in may_conflict:
                conflicted.add(result["_id"])
            elif result.get("error"):
                status = result["status"]
                if status == 409:
                    raise TransientError(f"{what}: HTTP 409 {error_reason(result['error'])}")
                raise item_error(f"{what}: HTTP {status}", status, result["error"])
        return conflicted

    def _entity_link_actions(
        self,
        wanted: dict[str, set[str]],
        creatable: dict[str, EntityDoc],
        routing: dict[str, str],
    ) -> list[dict[str, Any]]:
        if not wanted:
            return []
        with es_errors("read entity links"):
            docs = self.client.mget(
                index=self.names.entities,
                docs=[{"_id": t, "routing": routing[t]} for t in wanted],
                source_includes=["linked_memory_ids"],
            ).body["docs"]
        actions: list[dict[str, Any]] = []
        for doc in docs:
            target, memory_ids = doc["_id"], wanted[doc["_id"]]
            header = {"_index": self.names.entities, "_id": target, "routing": routing[target]}
            if not doc.get("found"):
                actions.append({"create": header})
                actions.append(creatable[target].source(sorted(memory_ids)))
                continue
            linked = set(doc["_source"].get("linked_memory_ids", []))
            if linked.issuperset(memory_ids):
                continue
            guard = {"if_seq_no": doc["_seq_no"], "if_primary_term": doc["_primary_term"]}
            actions.append({"update": {**header, **guard}})
            actions.append({"doc": {"linked_memory_ids": sorted(linked | memory_ids)}})
        return actions
