"""Phase 1: the existing memories of the scope closest to the new turn."""

from __future__ import annotations

from pipeline.deps import Deps
from pipeline.models import AddRequest, Role
from pipeline.state import JobState


def new_turn_text(request: AddRequest) -> str:
    """The text the new turn is about: its non-system messages, joined."""
    return "\n".join(m.text() for m in request.messages if m.role is not Role.SYSTEM).strip()


def needs_llm_extraction(request: AddRequest) -> bool:
    return request.infer and request.memory_type is None


def retrieve_existing(state: JobState, deps: Deps) -> JobState:
    """Top-k memories of the scope by the embedding of the new turn. Skipped when no LLM will
    read them (infer=False and procedural jobs)."""
    query = new_turn_text(state.request)
    if not needs_llm_extraction(state.request) or not query:
        return state
    vector = deps.embedder.embed([query])[0]
    found = deps.store.similar_memories(state.request.scope, vector, deps.limits.retrieved_memories)
    return state.with_(existing=found)
