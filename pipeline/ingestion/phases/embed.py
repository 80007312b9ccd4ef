"""Phase 3: one embedding call for all the facts of a batch; on failure, item by item."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pipeline.adapters.nlp.speaker import embedding_text, speaker_of
from pipeline.domain.protocols import Embedder
from pipeline.domain.state import ItemError, JobState, Phase
from pipeline.errors import MemqError
from pipeline.ingestion.batch import BatchResult, single
from pipeline.ingestion.deps import Deps

log = logging.getLogger("memq.embed")


def embed_facts_batch(states: Sequence[JobState], deps: Deps) -> BatchResult:
    """Fill each job's ``embeddings`` (aligned with its facts; None where an item could not be
    embedded, each such item reported in that job's ``errors``). One model call for the whole
    batch; if it fails, one call per fact, so a fact the model refuses costs only itself."""
    texts = [
        embedding_text(fact.text, speaker_of(fact, state.request.scope))
        for state in states
        for fact in state.facts
    ]
    if not texts:
        return BatchResult(states=[s.with_(embeddings=[]) for s in states])
    errors: list[ItemError | None]
    try:
        vectors: list[list[float] | None] = list(deps.embedder.embed(texts))
        errors = [None] * len(texts)
    except MemqError as exc:
        log.warning(
            "batch embedding of %d facts failed (%s); embedding one by one", len(texts), exc
        )
        vectors, errors = embed_one_by_one(deps.embedder, texts)
    out: list[JobState] = []
    start = 0
    for state in states:
        end = start + len(state.facts)
        failed = [e for e in errors[start:end] if e is not None]
        counts = {**state.counts, "embedded": state.counts.get("embedded", 0) + end - start}
        out.append(
            state.with_(
                embeddings=vectors[start:end], errors=[*state.errors, *failed], counts=counts
            )
        )
        start = end
    return BatchResult(states=out)


def embed_one_by_one(
    embedder: Embedder, texts: list[str]
) -> tuple[list[list[float] | None], list[ItemError | None]]:
    vectors: list[list[float] | None] = []
    errors: list[ItemError | None] = []
    for text in texts:
        try:
            vectors.append(embedder.embed([text])[0])
            errors.append(None)
        except MemqError as exc:
            vectors.append(None)
            errors.append(ItemError(phase=Phase.EMBED, reason=exc.reason, text=text))
    return vectors, errors


embed_facts = single(embed_facts_batch)
