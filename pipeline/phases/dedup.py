"""Phase 5: drop facts the scope already holds (by hash, over the whole scope) or that repeat
within the batch."""

from __future__ import annotations

from pipeline.deps import Deps
from pipeline.state import JobState


def dedup_facts(state: JobState, deps: Deps) -> JobState:
    """Fill ``state.keep`` (aligned with facts). Facts without an embedding are not kept (they
    were reported by the embed phase)."""
    known = deps.store.hashes_in_scope(state.request.scope, sorted(set(state.hashes)))
    seen: set[str] = set()
    keep: list[bool] = []
    for text_hash, vector in zip(state.hashes, state.embeddings, strict=True):
        keep.append(vector is not None and text_hash not in known and text_hash not in seen)
        seen.add(text_hash)
    embedded = [vector is not None for vector in state.embeddings]
    duplicates = sum(1 for kept, ok in zip(keep, embedded, strict=True) if ok and not kept)
    counts = {**state.counts, "facts": len(state.facts), "duplicates": duplicates}
    return state.with_(keep=keep, counts=counts)
