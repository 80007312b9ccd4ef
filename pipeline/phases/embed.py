"""Phase 3: one batch embedding call for all facts; on failure, item by item."""

from __future__ import annotations

import logging

from pipeline.deps import Deps
from pipeline.errors import MemqError
from pipeline.nlp.speaker import embedding_text, speaker_of
from pipeline.protocols import Embedder
from pipeline.state import ItemError, JobState, Phase

log = logging.getLogger("memq.embed")


def embed_facts(state: JobState, deps: Deps) -> JobState:
    """Fill ``state.embeddings`` (aligned with facts; None where an item could not be embedded,
    each such item reported in ``state.errors``)."""
    scope = state.request.scope
    texts = [embedding_text(fact.text, speaker_of(fact, scope)) for fact in state.facts]
    if not texts:
        return state.with_(embeddings=[])
    try:
        return state.with_(embeddings=list(deps.embedder.embed(texts)))
    except MemqError as exc:
        log.warning(
            "batch embedding of %d facts failed (%s); embedding one by one", len(texts), exc
        )
    vectors, errors = embed_one_by_one(deps.embedder, texts)
    return state.with_(embeddings=vectors, errors=[*state.errors, *errors])


def embed_one_by_one(
    embedder: Embedder, texts: list[str]
) -> tuple[list[list[float] | None], list[ItemError]]:
    vectors: list[list[float] | None] = []
    errors: list[ItemError] = []
    for text in texts:
        try:
            vectors.append(embedder.embed([text])[0])
        except MemqError as exc:
            vectors.append(None)
            errors.append(ItemError(phase=Phase.EMBED, reason=exc.reason, text=text))
    return vectors, errors
