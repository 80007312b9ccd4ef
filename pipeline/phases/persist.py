"""Phase 6: one bulk create of the kept facts as memories, plus their history rows.

Ids are deterministic, so re-running this phase after a crash meets its own documents: a
conflict whose stored hash and job are ours counts as stored, one with our hash from another
job is a duplicate (two workers raced on one fact), and one with another hash means the id is
held by a memory whose text was edited since — then the job-derived id is used.
"""

from __future__ import annotations

from pipeline.deps import Deps
from pipeline.models import fallback_memory_id, history_id, memory_id
from pipeline.nlp.speaker import speaker_of
from pipeline.state import ItemError, JobState, Phase, StoredMemory
from pipeline.store.protocol import HistoryDoc, MemoryDoc, WriteOutcome


def persist_memories(state: JobState, deps: Deps) -> JobState:
    """Fill ``state.stored`` with exactly the memories that are in the store for this job."""
    docs = [memory_doc(state, i) for i, kept in enumerate(state.keep) if kept]
    stored, errors, raced = write_memories(state, deps, docs)
    history = [history_row(state, doc) for doc in stored]
    history_errors = deps.store.write_history(history).failed
    errors += [
        ItemError(phase=Phase.PERSIST, reason=f"history: {r}") for r in history_errors.values()
    ]
    counts = {
        **state.counts,
        "stored": len(stored),
        "duplicates": state.counts.get("duplicates", 0) + raced,
    }
    return state.with_(
        stored=[StoredMemory(id=doc.id, text=doc.text, speaker=doc.speaker) for doc in stored],
        errors=[*state.errors, *errors],
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
    )


def write_memories(
    state: JobState, deps: Deps, docs: list[MemoryDoc]
) -> tuple[list[MemoryDoc], list[ItemError], int]:
    """Create ``docs``; returns what is stored for this job, item errors, and lost races."""
    by_id = {doc.id: doc for doc in docs}
    outcome = deps.store.create_memories(docs)
    stored = [by_id[i] for i in outcome.created]
    ours, raced, moved = sort_conflicts(state, by_id, outcome)
    stored += ours
    failed = dict(outcome.failed)
    if moved:
        by_id.update({doc.id: doc for doc in moved})
        second = deps.store.create_memories(moved)
        stored += [by_id[i] for i in second.created]
        stored += [by_id[i] for i, held in second.conflicts.items() if held.job_id == state.job_id]
        failed.update(second.failed)
    errors = [
        ItemError(phase=Phase.PERSIST, reason=reason, text=by_id[i].text)
        for i, reason in failed.items()
    ]
    return stored, errors, raced


def sort_conflicts(
    state: JobState, by_id: dict[str, MemoryDoc], outcome: WriteOutcome
) -> tuple[list[MemoryDoc], int, list[MemoryDoc]]:
    """Split conflicts into our own earlier writes, races lost to another job's copy of the
    same fact, and ids held by an edited memory (relocated to a job-derived id)."""
    ours: list[MemoryDoc] = []
    moved: list[MemoryDoc] = []
    raced = 0
    for doc_id, held in outcome.conflicts.items():
        doc = by_id[doc_id]
        if held.hash != doc.hash:
            moved.append(relocate(state, doc))
        elif held.job_id == state.job_id:
            ours.append(doc)
        else:
            raced += 1
    return ours, raced, moved


def relocate(state: JobState, doc: MemoryDoc) -> MemoryDoc:
    index = next(i for i, h in enumerate(state.hashes) if h == doc.hash)
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
