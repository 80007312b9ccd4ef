"""Vectors of texts that keep coming back, kept by the process that embedded them.

Entity names are such texts: the speaker of every memory, the people, places and pastimes a
user keeps talking about. Link embeds them batch after batch; with this cache the model runs
once for each name while it stays among the most recently used (``cachetools.LRUCache``), and
a batch that names nothing new makes no model call at all. The model is deterministic, so a
vector from the cache is the one the model would give. Vectors are held as float32 arrays
(the models' own precision): about 1.6 KB a name at 384 dimensions.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from cachetools import LRUCache

from pipeline.domain.protocols import Embedder


class CachedEmbedder:
    """``embedder`` with the vectors of the last ``size`` distinct texts kept (thread-safe:
    the I/O worker runs phases on threads)."""

    def __init__(self, embedder: Embedder, size: int) -> None:
        self.embedder = embedder
        self._vectors: LRUCache[str, np.ndarray] = LRUCache(maxsize=size)
        self._lock = threading.Lock()

    @property
    def dims(self) -> int:
        return self.embedder.dims

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of ``texts``, in order: the model is called once, for the distinct texts
        not held, and not at all when every one is."""
        held: dict[str, np.ndarray] = {}
        with self._lock:
            for text in texts:
                vector = self._vectors.get(text)
                if vector is not None:
                    held[text] = vector
        missing = list(dict.fromkeys(text for text in texts if text not in held))
        if missing:
            fresh = self.embedder.embed(missing)
            with self._lock:
                for text, fresh_vector in zip(missing, fresh, strict=True):
                    held[text] = self._vectors[text] = np.asarray(fresh_vector, dtype=np.float32)
        return [held[text].tolist() for text in texts]
