"""Vectors made before the index moved to another embedder, made again before they are written.

A job embeds its facts (embed) and its entities' names (link) a phase or two before persist
writes them. When ``memq reprocess --reembed`` moves the indices to another embedder in
between, persist meets an index of another vector size (``EmbedderChangedError``, retried);
by the retry the process's embedder follows the new index
(``pipeline.adapters.embedding.versioned``), and this step embeds again whatever is of the old size,
so the job lands whole in the new version instead of losing the facts Elasticsearch would refuse.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.adapters.nlp.speaker import embedding_text, speaker_of
from pipeline.domain.protocols import Embedder
from pipeline.domain.state import JobState
from pipeline.ingestion.deps import Deps

Vectors = list[list[float] | None]


def current_vectors(state: JobState, deps: Deps) -> JobState:
    """``state`` with its fact and entity vectors of the embedder's size (unchanged, and no
    model call, when they already are: the usual case)."""
    facts = [embedding_text(f.text, speaker_of(f, state.request.scope)) for f in state.facts]
    names = [entity.text for entity in state.entities]
    embeddings = again(deps.embedder, facts, state.embeddings)
    entity_vectors = again(deps.name_embedder, names, state.entity_vectors)
    if embeddings is state.embeddings and entity_vectors is state.entity_vectors:
        return state
    return state.with_(embeddings=embeddings, entity_vectors=entity_vectors)


def again(embedder: Embedder, texts: Sequence[str], vectors: Vectors) -> Vectors:
    """``vectors`` (aligned with ``texts``) if all are of ``embedder``'s size, else every one
    embedded anew (None, an item that could not be embedded, stays None)."""
    if len(texts) != len(vectors) or all(v is None or len(v) == embedder.dims for v in vectors):
        return vectors
    fresh = embedder.embed(list(texts))
    return [None if old is None else new for old, new in zip(vectors, fresh, strict=True)]
