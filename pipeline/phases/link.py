"""Phase 7: entities of the stored memories — one extraction pass, one batch embedding, one
batch search; each entity merges into a similar one of the scope (similarity >= 0.95) or is
created. Links are recorded atomically by the store, so concurrent jobs never lose links."""

from __future__ import annotations

import re
import unicodedata

from pipeline.deps import Deps
from pipeline.models import Scope, entity_id
from pipeline.protocols import Entity
from pipeline.state import JobState, StoredMemory
from pipeline.store.protocol import EntityDoc

Groups = dict[str, tuple[Entity, list[str]]]


def normalize_entity(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


def link_entities(state: JobState, deps: Deps) -> JobState:
    """Fill ``state.entity_ids`` and record entity ids on each stored memory."""
    groups = group_entities(state.stored, deps)
    if not groups:
        return state
    scope = state.request.scope
    names = list(groups)
    vectors = deps.embedder.embed([groups[n][0].text for n in names])
    nearest = deps.store.nearest_entities(scope, vectors)
    links: dict[str, list[str]] = {}
    for name, vector, near in zip(names, vectors, nearest, strict=True):
        entity, memory_ids = groups[name]
        doc = entity_doc(scope, name, entity, vector, state)
        into = near[0] if near and near[1] >= deps.limits.entity_merge_similarity else None
        linked = deps.store.link_entity(doc, memory_ids, None if into == doc.id else into)
        for memory in memory_ids:
            links.setdefault(memory, []).append(linked)
    deps.store.set_memory_entities(links)
    entity_ids = sorted({e for ids in links.values() for e in ids})
    return state.with_(entity_ids=entity_ids, counts={**state.counts, "entities": len(entity_ids)})


def group_entities(stored: list[StoredMemory], deps: Deps) -> Groups:
    """Entities by normalized text, each with the memories that mention it."""
    groups: Groups = {}
    found = deps.entities.extract([memory.text for memory in stored]) if stored else []
    for memory, entities in zip(stored, found, strict=True):
        for entity in entities:
            name = normalize_entity(entity.text)
            if name and memory.id not in groups.setdefault(name, (entity, []))[1]:
                groups[name][1].append(memory.id)
    return groups


def entity_doc(
    scope: Scope, name: str, entity: Entity, vector: list[float], state: JobState
) -> EntityDoc:
    return EntityDoc(
        id=entity_id(scope, name),
        scope=scope,
        text=entity.text,
        normalized=name,
        type=entity.type,
        embedding=vector,
        created_at=state.received_at,
    )
