"""Entities: their nearest neighbours for link, the links to memories (guarded writes), and
the reads by name and id that search and the explorer make."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pipeline.domain.models import Scope
from pipeline.errors import TransientError
from pipeline.store.client import es_errors
from pipeline.store.filters import with_substrings
from pipeline.store.indices import Kind
from pipeline.store.protocol import EntityDoc, EntityLink
from pipeline.store.queries import entities_named_body, nearest_entity_body
from pipeline.store.reads import EntityRef
from pipeline.store.repositories.base import Repository, scope_filter, search_header
from pipeline.store.routing import scope_routing, search_routing

LINK_ATTEMPTS = 20


def cosine_from_score(score: float) -> float:
    """Elasticsearch reports cosine similarity as (1 + cos) / 2; undo that."""
    return 2.0 * score - 1.0


class EntityRepository(Repository):
    kind = Kind.ENTITIES

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
            searches.append(search_header(self.index, scope))
            searches.append(nearest_entity_body(vector, scope_filter(scope)))
        return [
            (hits[0]["_id"], cosine_from_score(hits[0]["_score"])) if hits else None
            for hits in self.connection.msearch_hits(searches, "search similar entities")
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
            memories_index = self.connection.names.memories
            for memory, targets in memories.items():
                header = {"_index": memories_index, "_id": memory, "routing": routing[memory]}
                extra.append({"update": {**header, "retry_on_conflict": 3}})
                extra.append({"doc": with_substrings({"entity_ids": sorted(targets)})})
        for _ in range(LINK_ATTEMPTS):
            actions = self._link_actions(wanted, creatable, routing) + extra
            if not actions:
                return
            conflicted = self.connection.bulk_all_or_raise(
                actions, "link entities", frozenset(wanted), refresh
            )
            wanted = {target: ids for target, ids in wanted.items() if target in conflicted}
            extra = []
        raise TransientError(f"entities {sorted(wanted)}: too many concurrent link updates")

    def _link_actions(
        self,
        wanted: dict[str, set[str]],
        creatable: dict[str, EntityDoc],
        routing: dict[str, str],
    ) -> list[dict[str, Any]]:
        if not wanted:
            return []
        with es_errors("read entity links"):
            docs = self.connection.client.mget(
                index=self.index,
                docs=[{"_id": t, "routing": routing[t]} for t in wanted],
                source_includes=["linked_memory_ids"],
            ).body["docs"]
        actions: list[dict[str, Any]] = []
        for doc in docs:
            target, memory_ids = doc["_id"], wanted[doc["_id"]]
            header = {"_index": self.index, "_id": target, "routing": routing[target]}
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

    def entities_by_name(self, scope: Scope, names: Sequence[str]) -> dict[str, str]:
        """The scope's entities whose normalized text is one of ``names``: name -> entity id."""
        if not names:
            return {}
        body = entities_named_body(names, scope_filter(scope))
        [response] = self.connection.search_indices(
            [("entities", scope, body)], "look up entities by name"
        )
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
                docs = self.connection.client.mget(
                    index=self.index,
                    ids=list(entity_ids),
                    routing=routing,
                    source_includes=["linked_memory_ids"],
                ).body["docs"]
            return {
                d["_id"]: d["_source"].get("linked_memory_ids", []) for d in docs if d.get("found")
            }
        with es_errors("read entity links"):
            hits = self.connection.client.search(
                index=self.index,
                query={"ids": {"values": list(entity_ids)}},
                size=len(entity_ids),
                source_includes=["linked_memory_ids"],
                track_total_hits=False,
            )["hits"]["hits"]
        return {h["_id"]: h["_source"].get("linked_memory_ids", []) for h in hits}

    def entities_of(self, scope: Scope, entity_ids: Sequence[str]) -> list[EntityRef]:
        """The entities ``entity_ids`` of ``scope``, one round trip on the scope's shard; ids
        that are gone are left out."""
        if not entity_ids:
            return []
        with es_errors("read entities"):
            docs = self.connection.client.mget(
                index=self.index,
                ids=list(entity_ids),
                routing=scope_routing(scope),
                source_includes=["text", "type", "tenant"],
            ).body["docs"]
        found = [EntityRef.from_source(d["_id"], d["_source"]) for d in docs if d.get("found")]
        return [e for e in found if e.tenant == scope.tenant]
