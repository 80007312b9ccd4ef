"""Phase 7: entities of the stored memories — one extraction pass, one batch embedding, one
batch search; each entity merges into a similar one of the scope (similarity >= 0.95) or is
created. All links are recorded in one store call (for Elasticsearch: one read and one bulk),
with optimistic concurrency, so concurrent jobs never lose each other's links."""

from __future__ import annotations

import re
import unicodedata

from pipeline.deps import Deps
from pipeline.models import Scope, entity_id
from pipeline.nlp.entities import NAME
from pipeline.protocols import Entity
from pipeline.state import JobState, StoredMemory
from pipeline.store.protocol import EntityDoc, EntityLink

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
    links: list[EntityLink] = []
    for name, vector, near in zip(names, vectors, nearest, strict=True):
        entity, memory_ids = groups[name]
        doc = entity_doc(scope, name, entity, vector, state)
        target = doc.id
        if near is not None and near[1] >= deps.limits.entity_merge_similarity:
            target = near[0]  # merge into a similar entity of the scope
        links.append(EntityLink(doc, memory_ids, target))
    deps.store.link_entities(links)
    entity_ids = sorted({link.target for link in links})
    return state.with_(entity_ids=entity_ids, counts={**state.counts, "entities": len(entity_ids)})


def group_entities(stored: list[StoredMemory], deps: Deps) -> Groups:
    """Entities by normalized text, each with the memories that mention it. A memory's speaker
    is one of its entities: "I adopted a dog", said by Maria, is about Maria."""
    groups: Groups = {}
    found = deps.entities.extract([memory.text for memory in stored]) if stored else []
    for memory, entities in zip(stored, found, strict=True):
        speaker = [Entity(memory.speaker, NAME)] if memory.speaker else []
        for entity in [*speaker, *entities]:
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
