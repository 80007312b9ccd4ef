"""Phase 7: one bulk request creating the kept facts of a whole batch as memories, together
with their history rows, each memory with the ``entity_ids`` link planned for it; then the
links on the entities of the memories stored (one read and one bulk for the batch).

Ids are deterministic, so re-running this phase after a crash meets its own documents: a
conflict whose stored hash and job are ours counts as stored, one with our hash from another
job is a duplicate (two workers raced on one fact), and one with another hash means the id is
held by a memory whose text was edited since — then the job-derived id is used. History rows
go in the same bulk as their memories; the rare row whose memory turned out not to be ours
(refused, raced, or moved to another id) is deleted afterwards, so history reports only what
was stored. Entities are linked to stored memories only, so a memory that was refused leaves no
link behind.

Then the replacements the extraction named (``pipeline.domain.validity``): each stored fact's
replaced memories are closed in one more read and bulk for the batch, and each closure gets a
history row on the memory it closed (``REPLACED``, id from memory, job and the replacing memory).
Closures merge as set unions and minimums, so a replayed persist writes nothing new and two
jobs replacing one memory both land.

Both bulks ask Elasticsearch to refresh the shards they wrote to (``refresh``), so when this
phase ends its memories and their entity links are searchable: the job is reported
``succeeded`` after it, and succeeded means findable, from any process. That is one refresh of
the touched shards per bulk, per batch (not per job), in the bulk's own request; the 1 s
refresh interval is never waited for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.adapters.nlp.speaker import speaker_of
from pipeline.domain.jobs import ReplacedMemory, StoredMemory
from pipeline.domain.models import fallback_memory_id, history_id, memory_id, message_id
from pipeline.domain.state import ItemError, JobState, Phase
from pipeline.domain.validity import REPLACED_EVENT, Closure, Replacement
from pipeline.ingestion.batch import shared, single
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases.link import linked, planned_links, targets_of
from pipeline.ingestion.phases.revector import current_vectors
from pipeline.store.protocol import HistoryDoc, MemoryDoc, WriteOutcome


@dataclass
class Written:
    """What one job's part of the bulk came to."""

    stored: list[MemoryDoc] = field(default_factory=list)
    errors: list[ItemError] = field(default_factory=list)
    raced: int = 0
    stray: list[HistoryDoc] = field(default_factory=list)  # history rows of memories not ours
    closures: list[Closure] = field(default_factory=list)  # what its replacements closed


def persist_memories_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Fill each job's ``stored`` with exactly the memories that are in the store for it."""
    states = [current_vectors(s, deps) for s in states]
    docs = {s.job_id: [memory_doc(s, i) for i, kept in enumerate(s.keep) if kept] for s in states}
    everything = [doc for s in states for doc in docs[s.job_id]]
    rows = [history_row(s, doc) for s in states for doc in docs[s.job_id]]
    memories, history = write(deps, everything, rows)
    results = [settle(s, deps, docs[s.job_id], memories, history) for s in states]
    stray = [row for written in results for row in written.stray]
    if stray:
        deps.store.delete_history(stray)
    close_replaced(states, results, deps)
    links = {
        s.job_id: planned_links(s, facts_stored(s, written))
        for s, written in zip(states, results, strict=True)
    }
    everyone = [link for job in links.values() for link in job]
    if everyone:
        deps.store.link_entities(everyone, update_memories=False, refresh=True)
    return [
        linked(finish(s, written), links[s.job_id])
        for s, written in zip(states, results, strict=True)
    ]


def close_replaced(states: Sequence[JobState], results: Sequence[Written], deps: Deps) -> None:
    """Apply the replacements named by the facts each job stored (one store call for the
    batch), record each job's closures in its ``Written``, and write their history rows."""
    asked = [
        replacements_of(s, facts_stored(s, written))
        for s, written in zip(states, results, strict=True)
    ]
    everyone = [r for job in asked for r in job]
    if not everyone:
        return
    closures = iter(deps.store.replace_memories(everyone))
    rows: list[HistoryDoc] = []
    for state, job, written in zip(states, asked, results, strict=True):
        written.closures = [c for c in (next(closures) for _ in job) if c is not None]
        rows += [replaced_row(state, c) for c in written.closures]
    failed = deps.store.write_history(rows).failed
    for state, written in zip(states, results, strict=True):
        for row in (replaced_row(state, c) for c in written.closures):
            if row.id in failed:
                reason = f"history: {failed[row.id]}"
                written.errors.append(ItemError(phase=Phase.PERSIST, reason=reason))


def replacements_of(state: JobState, stored: dict[int, str]) -> list[Replacement]:
    """The replacements named by the facts of ``state`` that are stored (fact -> memory id)."""
    scope = state.request.scope
    return [
        Replacement(new_id=memory, old_id=old, scope=scope)
        for index, memory in sorted(stored.items())
        for old in state.facts[index].replaces_ids
        if old != memory
    ]


def replaced_row(state: JobState, closure: Closure) -> HistoryDoc:
    """The history row of a closure, on the memory it closed."""
    return HistoryDoc(
        id=history_id(closure.closed, REPLACED_EVENT, state.job_id, closure.by),
        memory_id=closure.closed,
        scope=state.request.scope,
        event=REPLACED_EVENT,
        job_id=state.job_id,
        created_at=state.received_at,
        old=closure.closed_text,
        new=closure.by_text,
        replaced_by=closure.by,
    )


def facts_stored(state: JobState, written: Written) -> dict[int, str]:
    """Fact index -> the id of the memory stored for it."""
    index = kept_facts(state)
    return {index[doc.hash]: doc.id for doc in written.stored}


def kept_facts(state: JobState) -> dict[str, int]:
    """The index of each kept fact, by its hash (a job's kept hashes are distinct)."""
    return {h: i for i, (h, kept) in enumerate(zip(state.hashes, state.keep, strict=True)) if kept}


def write(
    deps: Deps, docs: list[MemoryDoc], rows: list[HistoryDoc]
) -> tuple[WriteOutcome, WriteOutcome]:
    if not docs:
        return WriteOutcome(), WriteOutcome()
    return deps.store.create_memories_with_history(docs, rows, refresh=True)


def settle(
    state: JobState,
    deps: Deps,
    docs: list[MemoryDoc],
    memories: WriteOutcome,
    history: WriteOutcome,
) -> Written:
    """Sort this job's items of the bulk into stored, failed, raced and moved; moved ones are
    written again under their job-derived id (a second request, only when an id was taken)."""
    written = Written()
    moved = take(state, {doc.id: doc for doc in docs}, memories, history, written)
    if moved:
        relocated = [relocate(state, doc) for doc in moved]
        second = write(deps, relocated, [history_row(state, doc) for doc in relocated])
        for doc in take(state, {doc.id: doc for doc in relocated}, *second, written):
            reason = f"memory id {doc.id} is taken by another memory"
            written.errors.append(ItemError(phase=Phase.PERSIST, reason=reason, text=doc.text))
    return written


def take(
    state: JobState,
    by_id: dict[str, MemoryDoc],
    memories: WriteOutcome,
    history: WriteOutcome,
    written: Written,
) -> list[MemoryDoc]:
    """Record the outcome of ``by_id``'s documents; returns those whose id is held by a memory
    with another text (to be moved)."""
    created = set(memories.created)
    moved: list[MemoryDoc] = []
    for doc_id, doc in by_id.items():
        row = history_id(doc_id, "ADD", state.job_id)
        held = memories.conflicts.get(doc_id)
        ours = held is not None and held.hash == doc.hash and held.job_id == state.job_id
        if doc_id in created or ours:
            written.stored.append(doc)
            if row in history.failed:
                reason = f"history: {history.failed[row]}"
                written.errors.append(ItemError(phase=Phase.PERSIST, reason=reason))
            continue
        if row in history.created:
            written.stray.append(history_row(state, doc))
        if doc_id in memories.failed:
            reason = memories.failed[doc_id]
            written.errors.append(ItemError(phase=Phase.PERSIST, reason=reason, text=doc.text))
        elif held is not None and held.hash == doc.hash:
            written.raced += 1
        elif held is not None:
            moved.append(doc)
    return moved


def finish(state: JobState, written: Written) -> JobState:
    counts = {
        **state.counts,
        "stored": len(written.stored),
        "duplicates": state.counts.get("duplicates", 0) + written.raced,
    }
    if written.closures:
        counts["replaced"] = len(written.closures)
    replaced: dict[str, list[ReplacedMemory]] = {}
    for closure in written.closures:  # the new memory closed an older one (not a backfill's)
        replaced.setdefault(closure.by, []).append(
            ReplacedMemory(id=closure.closed, text=closure.closed_text)
        )
    return state.with_(
        stored=[
            StoredMemory(
                id=doc.id,
                text=doc.text,
                speaker=doc.speaker,
                replaces=tuple(replaced.get(doc.id, ())),
            )
            for doc in written.stored
        ],
        errors=[*state.errors, *written.errors],
        counts=counts,
    )


def memory_doc(state: JobState, index: int, doc_id: str | None = None) -> MemoryDoc:
    request, fact, text_hash = state.request, state.facts[index], state.hashes[index]
    embedding = state.embeddings[index]
    assert embedding is not None  # dedup keeps only embedded facts
    return MemoryDoc(
        id=doc_id or memory_id(request.scope, text_hash),
        scope=request.scope,
        text=fact.text,
        text_lemmatized=state.lemmas[index],
        embedding=embedding,
        hash=text_hash,
        job_id=state.job_id,
        created_at=state.received_at,
        observed_at=request.timestamp or state.received_at,
        role=fact.role,
        attributed_to=fact.attributed_to,
        actor_id=fact.actor_id,
        speaker=speaker_of(fact, request.scope),
        memory_type=request.memory_type.value if request.memory_type else None,
        metadata=dict(request.metadata),
        expiration_date=request.expiration_date,
        turn=fact.turn,
        source_ids=tuple(message_id(state.job_id, seq) for seq in fact.source_seqs),
        entity_ids=targets_of(state, index),
    )


def relocate(state: JobState, doc: MemoryDoc) -> MemoryDoc:
    index = kept_facts(state)[doc.hash]
    return memory_doc(state, index, fallback_memory_id(state.job_id, doc.hash))


def history_row(state: JobState, doc: MemoryDoc) -> HistoryDoc:
    return HistoryDoc(
        id=history_id(doc.id, "ADD", state.job_id),
        memory_id=doc.id,
        scope=doc.scope,
        event="ADD",
        job_id=state.job_id,
        created_at=state.received_at,
        new=doc.text,
        actor=doc.actor_id,
    )


persist_memories_batch = shared(persist_memories_of)
persist_memories = single(persist_memories_batch)
