"""Vectors of texts embedded ahead of need, shared by every worker process through Redis.

Retrieval embeds each job's new turn, and that text is known from the moment the job is
accepted, long before its turn comes when it waits behind its session's earlier jobs. A worker
embeds such turns ahead (the ``memq.batch.prepare`` task) while the jobs in front of them run,
and keeps the vectors here; retrieval then finds them instead of calling the model. Vectors
are keyed by a digest of the model and the text, kept as float32 bytes (the models' own
precision: the vector a later call would give), removed when retrieval takes them, and expire
after ``ttl_s``: a turn embedded ahead is used within seconds, and one never used (its job
erased or failed) is gone soon after. Redis at fault only costs the model call the kept vector
would have saved.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import redis

from pipeline.adapters.embedding.versioned import model_key
from pipeline.domain.protocols import Embedder

log = logging.getLogger("memq.embedding")

TTL_S = 900


def vector_key(prefix: str, model: str, text: str) -> str:
    """Where the vector of ``text`` by ``model`` is kept."""
    digest = hashlib.sha256(f"{model}\0{text}".encode()).hexdigest()
    return f"{prefix}:vector:{digest}"


def drop_vectors(client: redis.Redis, prefix: str, model: str, texts: Sequence[str]) -> int:
    """Remove the vectors kept for ``texts`` (a user's erased jobs); returns how many were
    kept. Raises what Redis raises."""
    if not texts:
        return 0
    return int(client.delete(*{vector_key(prefix, model, text) for text in texts}))


@dataclass(frozen=True)
class SharedVectors:
    """``embedder`` backed by vectors kept in Redis under ``prefix`` by ``embed_ahead``, in
    any process: ``embed`` takes those it finds (one round trip) and calls the model once for
    the rest."""

    embedder: Embedder
    client: redis.Redis
    prefix: str
    model: str
    ttl_s: int = TTL_S

    @property
    def dims(self) -> int:
        return self.embedder.dims

    def key(self, text: str) -> str:
        """The text's key under the embedder in use: vectors kept before a switch of
        embedder (``memq reprocess``) are not taken after it."""
        return vector_key(self.prefix, model_key(self.embedder, self.model), text)

    def held(self, texts: Sequence[str], *, take: bool = False) -> dict[str, list[float]]:
        """The vectors kept for ``texts`` (none when Redis cannot be read); with ``take``
        they are removed as they are read, in the same round trip."""
        distinct = list(dict.fromkeys(texts))
        if not distinct:
            return {}
        keys = [self.key(text) for text in distinct]
        try:
            if take:
                pipe = self.client.pipeline(transaction=False)
                for key in keys:
                    pipe.getdel(key)
                raw = pipe.execute()
            else:
                raw = self.client.mget(keys)
        except redis.RedisError as exc:
            log.warning("kept vectors not read, embedding instead: %s", exc)
            return {}
        found: dict[str, list[float]] = {}
        for text, value in zip(distinct, raw, strict=True):
            if isinstance(value, bytes) and len(value) == 4 * self.dims:
                found[text] = np.frombuffer(value, dtype="<f4").tolist()
        return found

    def keep(self, vectors: dict[str, list[float]]) -> None:
        """Keep ``vectors`` (text to vector) for ``ttl_s``; a write that fails is logged."""
        if not vectors:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for text, vector in vectors.items():
                pipe.set(self.key(text), np.asarray(vector, dtype="<f4").tobytes(), ex=self.ttl_s)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("vectors not kept: %s", exc)

    def embed_ahead(self, texts: Sequence[str]) -> int:
        """Embed the texts not kept yet, in one model call, and keep their vectors; returns
        how many were embedded."""
        found = self.held(texts)
        missing = [text for text in dict.fromkeys(texts) if text not in found]
        if missing:
            self.keep(dict(zip(missing, self.embedder.embed(missing), strict=True)))
        return len(missing)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of ``texts`` in order, in float32 whether kept or not: those embedded ahead,
        taken (each is used once), and one model call for the rest."""
        found = self.held(texts, take=True)
        missing = list(dict.fromkeys(text for text in texts if text not in found))
        if missing:
            fresh = np.asarray(self.embedder.embed(missing), dtype="<f4").tolist()
            found.update(zip(missing, fresh, strict=True))
        return [found[text] for text in texts]
