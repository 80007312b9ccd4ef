"""Phase 5: drop facts the scope already holds (by hash, over the whole scope) or that repeat
within the job. Jobs of one batch belong to different sessions, hence different scopes."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.domain.state import JobState
from pipeline.ingestion.batch import shared, single
from pipeline.ingestion.deps import Deps


def dedup_facts_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Fill ``keep`` (aligned with facts) of each job: one multi-search for the batch. Facts
    without an embedding are not kept (the embed phase reported them). A memory the job itself
    wrote (an earlier attempt that failed later, linking the entities in persist, or in
    finalize) is not a duplicate: the job keeps the fact, persist meets its own document (same
    id) and counts it stored, so a replay reports and links what the first attempt wrote."""
    queries = [(s.request.scope, sorted(set(s.hashes))) for s in states]
    known = deps.store.hashes_in_scopes(queries, not_of_jobs=[s.job_id for s in states])
    return [keep_new(state, held) for state, held in zip(states, known, strict=True)]


def keep_new(state: JobState, known: set[str]) -> JobState:
    seen: set[str] = set()
    keep: list[bool] = []
    for text_hash, vector in zip(state.hashes, state.embeddings, strict=True):
        keep.append(vector is not None and text_hash not in known and text_hash not in seen)
        seen.add(text_hash)
    embedded = [vector is not None for vector in state.embeddings]
    duplicates = sum(1 for kept, ok in zip(keep, embedded, strict=True) if ok and not kept)
    counts = {**state.counts, "facts": len(state.facts), "duplicates": duplicates}
    return state.with_(keep=keep, counts=counts)


dedup_facts_batch = shared(dedup_facts_of)
dedup_facts = single(dedup_facts_batch)
