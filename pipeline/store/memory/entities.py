"""Entities and their links in memory (``repositories.entities``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.domain.models import Scope
from pipeline.store.memory.tables import Tables, cosine, in_scope
from pipeline.store.protocol import (
    EntityLink,
)


class EntitiesInMemory(Tables):
    def nearest_entities_many(
        self, queries: Sequence[tuple[Scope, Sequence[float]]]
    ) -> list[tuple[str, float] | None]:
        return [self.nearest_entities(scope, [vector])[0] for scope, vector in queries]

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
