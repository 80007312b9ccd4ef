"""Phase 7: entities of the stored memories of a whole batch — one extraction pass, one
embedding call, one multi-search; each entity merges into a similar one of its scope
(similarity >= 0.95) or is created. All links are recorded in one store call (for
Elasticsearch: one read and one bulk), with optimistic concurrency, so concurrent jobs never
lose each other's links."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from pipeline.batch import shared, single
from pipeline.deps import Deps
from pipeline.models import Scope, entity_id
from pipeline.nlp.entities import NAME
from pipeline.protocols import Entity
from pipeline.state import JobState
from pipeline.store.protocol import EntityDoc, EntityLink

Groups = dict[str, tuple[Entity, list[str]]]


def normalize_entity(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


def link_entities_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Fill each job's ``entity_ids`` and record entity ids on each stored memory."""
    texts = [memory.text for state in states for memory in state.stored]
    found = iter(deps.entities.extract(texts) if texts else [])
    groups = {s.job_id: group_entities(s, [next(found) for _ in s.stored]) for s in states}
    wanted = [
        (state, name, entity)
        for state in states
        for name, (entity, _) in groups[state.job_id].items()
    ]
    if not wanted:
        return list(states)
    vectors = deps.embedder.embed([entity.text for _, _, entity in wanted])
    scopes = [state.request.scope for state, _, _ in wanted]
    nearest = deps.store.nearest_entities_many(list(zip(scopes, vectors, strict=True)))
    links: dict[str, list[EntityLink]] = {state.job_id: [] for state in states}
    for (state, name, entity), vector, near in zip(wanted, vectors, nearest, strict=True):
        doc = entity_doc(state.request.scope, name, entity, vector, state)
        target = doc.id
        if near is not None and near[1] >= deps.limits.entity_merge_similarity:
            target = near[0]  # merge into a similar entity of the scope
        memory_ids = groups[state.job_id][name][1]
        links[state.job_id].append(EntityLink(doc, memory_ids, target))
    deps.store.link_entities([link for job in links.values() for link in job])
    return [linked(state, links[state.job_id]) for state in states]


def linked(state: JobState, links: list[EntityLink]) -> JobState:
    if not links:
        return state
    entity_ids = sorted({link.target for link in links})
    return state.with_(entity_ids=entity_ids, counts={**state.counts, "entities": len(entity_ids)})


def group_entities(state: JobState, found: list[list[Entity]]) -> Groups:
    """The job's entities by normalized text, each with the memories that mention it. A
    memory's speaker is one of its entities: "I adopted a dog", said by Maria, is about Maria."""
    groups: Groups = {}
    for memory, entities in zip(state.stored, found, strict=True):
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


link_entities_batch = shared(link_entities_of)
link_entities = single(link_entities_batch)
