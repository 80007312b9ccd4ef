"""Phase 1: the existing memories of the scope closest to the new turn."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pipeline.adapters.embedding.shared import SharedVectors
from pipeline.domain.models import AddRequest, Role
from pipeline.domain.state import JobState
from pipeline.ingestion.batch import shared, single
from pipeline.ingestion.deps import Deps


def new_turn_text(request: AddRequest) -> str:
    """The text the new turn is about: its non-system messages, joined."""
    return "\n".join(m.text() for m in request.messages if m.role is not Role.SYSTEM).strip()


def observed_at(state: JobState) -> datetime:
    """When the job's conversation took place: its own timestamp, else when it was received."""
    return state.request.timestamp or state.received_at


def query_texts(states: Sequence[JobState]) -> list[tuple[int, str]]:
    """(index, text) of each job whose retrieval searches with its new turn: those an LLM
    extracts facts from (``AddRequest.extracts_facts``) and that have a turn to embed."""
    return [
        (i, text)
        for i, s in enumerate(states)
        if s.request.extracts_facts() and (text := new_turn_text(s.request))
    ]


def embed_queries_ahead(states: Sequence[JobState], deps: Deps) -> int:
    """Embed the new turns of jobs that have not reached retrieval yet and keep their vectors
    for it (``pipeline.adapters.embedding.shared``); returns how many texts the model embedded (none
    where no query embedder keeps them)."""
    texts = [text for _, text in query_texts(states)]
    if not texts or not isinstance(deps.queries, SharedVectors):
        return 0
    return deps.queries.embed_ahead(texts)


def retrieve_existing_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Top-k memories of each scope by the embedding of its new turn, among those still true
    when the conversation took place (a backfilled older conversation also sees what later
    replaced the memories of its time, so its facts can be closed by them): one embedding call
    (none when every turn was embedded ahead) and one multi-search for the batch. Skipped for
    jobs no LLM will read them for (see ``AddRequest.extracts_facts``)."""
    wanted = query_texts(states)
    if not wanted:
        return list(states)
    vectors = deps.query_embedder.embed([text for _, text in wanted])
    found = deps.store.similar_memories_many(
        [(states[i].request.scope, vector) for (i, _), vector in zip(wanted, vectors, strict=True)],
        deps.limits.retrieved_memories,
        valid_at=[observed_at(states[i]) for i, _ in wanted],
    )
    out = list(states)
    for (i, _), existing in zip(wanted, found, strict=True):
        # the new turn was embedded for this job (ahead, or in the call above)
        counts = {**states[i].counts, "embedded": states[i].counts.get("embedded", 0) + 1}
        out[i] = states[i].with_(existing=existing, counts=counts)
    return out


retrieve_existing_batch = shared(retrieve_existing_of)
retrieve_existing = single(retrieve_existing_batch)
