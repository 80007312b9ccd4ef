"""Phase 6: entities of the kept facts of a whole batch — one extraction pass, one embedding
call (for the names not embedded lately, ``Deps.names``), one multi-search; each entity merges
into a similar one of its scope (similarity >= 0.95) or is its own. The phase decides the links
and writes nothing: persist, next, creates each memory with its ``entity_ids`` already set and
then records the links on the entities, so a memory is written once (an update right after its
creation would make Elasticsearch read it back from its translog and index its vector a second
time).

A job that persisted before it linked (a state saved by a release that ran link after persist)
is linked here the old way: its stored memories, entities and memories' ``entity_ids`` in one
store call."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from pipeline.adapters.nlp.entities import NAME
from pipeline.adapters.nlp.speaker import speaker_of
from pipeline.domain.models import Scope, entity_id
from pipeline.domain.protocols import Entity
from pipeline.domain.state import JobState, Phase, PlannedEntity
from pipeline.ingestion.batch import shared, single
from pipeline.ingestion.deps import Deps
from pipeline.store.protocol import EntityDoc, EntityLink

# What an entity is found in: its position (a fact index, or a stored memory's), the text and
# who said it (a memory's speaker is one of its entities: "I adopted a dog", said by Maria, is
# about Maria).
Mention = tuple[int, str, str | None]
Groups = dict[str, tuple[Entity, list[int]]]


# An entity of a job (with the positions of the mentions it was found in) and its vector.
Found = tuple[PlannedEntity, list[float]]


def normalize_entity(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().casefold()


def link_entities_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Fill each job's ``entities`` (and their vectors) from its kept facts."""
    late = [s for s in states if s.is_done(Phase.PERSIST)]
    ahead = [s for s in states if not s.is_done(Phase.PERSIST)]
    found = find_entities([(s, kept_mentions(s)) for s in ahead], deps)
    done = {s.job_id: planned(s, f) for s, f in zip(ahead, found, strict=True)}
    done |= {s.job_id: s for s in link_stored(late, deps)}
    return [done[s.job_id] for s in states]


def kept_mentions(state: JobState) -> list[Mention]:
    scope = state.request.scope
    return [
        (i, fact.text, speaker_of(fact, scope))
        for i, (fact, kept) in enumerate(zip(state.facts, state.keep, strict=True))
        if kept
    ]


def planned(state: JobState, found: list[Found]) -> JobState:
    return state.with_(
        entities=[entity for entity, _ in found], entity_vectors=[vector for _, vector in found]
    )


def find_entities(jobs: Sequence[tuple[JobState, list[Mention]]], deps: Deps) -> list[list[Found]]:
    """The entities of each job's mentions: one extraction, one embedding call and one
    multi-search for all of them."""
    texts = [text for _, mentions in jobs for _, text, _ in mentions]
    extracted = iter(deps.entities.extract(texts) if texts else [])
    groups = [group_entities(mentions, [next(extracted) for _ in mentions]) for _, mentions in jobs]
    wanted = [
        (job, state.request.scope, name, entity, positions)
        for job, ((state, _), group) in enumerate(zip(jobs, groups, strict=True))
        for name, (entity, positions) in group.items()
    ]
    result: list[list[Found]] = [[] for _ in jobs]
    if not wanted:
        return result
    vectors = deps.name_embedder.embed([entity.text for _, _, _, entity, _ in wanted])
    nearest = deps.store.nearest_entities_many(
        [(scope, vector) for (_, scope, _, _, _), vector in zip(wanted, vectors, strict=True)]
    )
    merge_at = deps.limits.entity_merge_similarity
    for (job, scope, name, entity, positions), vector, near in zip(
        wanted, vectors, nearest, strict=True
    ):
        target = near[0] if near is not None and near[1] >= merge_at else entity_id(scope, name)
        found = PlannedEntity(
            name=name, text=entity.text, type=entity.type, target=target, facts=positions
        )
        result[job].append((found, vector))
    return result


def group_entities(mentions: list[Mention], found: list[list[Entity]]) -> Groups:
    """The entities by normalized text, each with the positions of the mentions that name it."""
    groups: Groups = {}
    for (position, _, speaker), entities in zip(mentions, found, strict=True):
        said_by = [Entity(speaker, NAME)] if speaker else []
        for entity in [*said_by, *entities]:
            name = normalize_entity(entity.text)
            if name and position not in groups.setdefault(name, (entity, []))[1]:
                groups[name][1].append(position)
    return groups


def planned_links(state: JobState, memory_of_fact: dict[int, str]) -> list[EntityLink]:
    """The links of the job's planned entities to the memories stored for their facts
    (``memory_of_fact``: fact index -> memory id); entities of no stored memory are left out."""
    links: list[EntityLink] = []
    for planned_entity, vector in zip(state.entities, state.entity_vectors, strict=True):
        memory_ids = [memory_of_fact[i] for i in planned_entity.facts if i in memory_of_fact]
        if memory_ids and vector is not None:
            entity = Entity(planned_entity.text, planned_entity.type)
            doc = entity_doc(state.request.scope, planned_entity.name, entity, vector, state)
            links.append(EntityLink(doc, memory_ids, planned_entity.target))
    return links


def targets_of(state: JobState, fact: int) -> tuple[str, ...]:
    """The entity ids a memory of fact ``fact`` is linked to."""
    return tuple(sorted({e.target for e in state.entities if fact in e.facts}))


def link_stored(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Link the stored memories of jobs that persisted first: entities and the memories'
    ``entity_ids`` in one store call. Their entities are found as link finds a job's, with
    the positions of stored memories where a job's would name facts."""
    if not states:
        return []
    mentions = [[(i, m.text, m.speaker) for i, m in enumerate(s.stored)] for s in states]
    found = find_entities(list(zip(states, mentions, strict=True)), deps)
    links = {
        s.job_id: planned_links(planned(s, job), {i: m.id for i, m in enumerate(s.stored)})
        for s, job in zip(states, found, strict=True)
    }
    # searchable when the phase ends, as persist's writes are (succeeded means findable)
    deps.store.link_entities([link for job in links.values() for link in job], refresh=True)
    return [linked(s, links[s.job_id]) for s in states]


def linked(state: JobState, links: list[EntityLink]) -> JobState:
    """The job with the entities its memories were linked to."""
    if not links:
        return state
    entity_ids = sorted({link.target for link in links})
    return state.with_(entity_ids=entity_ids, counts={**state.counts, "entities": len(entity_ids)})


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
