"""The embedder belongs to the index version, not to the process.

Vectors of two embedders cannot be compared, so the memories (and entities) of one index
version are all of one embedder, recorded in the index's mapping ``_meta.embedder``
(``EmbedderSpec``: kind, model, dims, base URL). ``memq reprocess --reembed`` builds a new
version with another embedder and moves the aliases to it; from then on every query and every
new memory must be embedded by that embedder, in the API and in every worker, whatever their
environment says. So a process does not embed with the embedder of its settings but with an
``IndexEmbedder``: the embedder named by the index the memories alias points at, read again
every ``interval_s`` (2 s) and at once when a store call met an index of another vector size
(``EmbedderChangedError``: the searcher refreshes and searches again; a worker's phase is
retried, and persist embeds again what it holds of the old size,
``pipeline.ingestion.phases.revector``).

The settings' embedder (``MEMQ_EMBEDDER_*``) is the one a new deployment's indices are made
with, and the one used for an index that names none (made before this). Its API key is used
for any ``openai`` embedder the index names (keys are never written into an index).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.config import EmbedderConfig, Settings
from pipeline.domain.protocols import Embedder
from pipeline.errors import MemqError

REFRESH_INTERVAL_S = 2.0


class EmbedderSpec(BaseModel):
    """What makes vectors comparable: the embedder that made an index version's vectors."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: str
    model: str
    dims: int
    base_url: str | None = None

    @classmethod
    def of(cls, config: EmbedderConfig) -> EmbedderSpec:
        return cls(kind=config.kind, model=config.model, dims=config.dims, base_url=config.base_url)

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> EmbedderSpec | None:
        """The spec an index's ``_meta`` records, or None (an index made before specs)."""
        found = meta.get("embedder")
        return cls.model_validate(found) if isinstance(found, dict) else None

    def meta(self) -> dict[str, Any]:
        return self.model_dump()

    def config(self, base: EmbedderConfig) -> EmbedderConfig:
        """``base`` (threads, batch size, timeout, key) with this spec's model."""
        return base.model_copy(update=self.model_dump())

    @property
    def digest(self) -> str:
        """Eight hex characters naming the spec (in index names)."""
        text = json.dumps(self.model_dump(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def describe(self) -> str:
        where = f" at {self.base_url}" if self.base_url else ""
        return f"{self.kind} {self.model} ({self.dims} dims){where}"


@dataclass(frozen=True)
class Models:
    """One spec's embedder, and its cache of entity-name vectors (if any)."""

    embedder: Embedder
    names: Embedder


ReadSpec = Callable[[], EmbedderSpec | None]
MakeModels = Callable[[EmbedderSpec], Models]


class IndexEmbedder:
    """An ``Embedder`` that embeds with the embedder of the index version in use (see the
    module doc). ``names`` is the same, through each spec's name cache. Thread-safe."""

    def __init__(
        self,
        default: EmbedderSpec,
        read_spec: ReadSpec,
        make: MakeModels,
        interval_s: float = REFRESH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.default = default
        self._read_spec = read_spec
        self._make = make
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._models: dict[EmbedderSpec, Models] = {}
        self._spec = default
        self._read_at: float | None = None
        self.names: Embedder = _Names(self)

    @property
    def dims(self) -> int:
        return self.models().embedder.dims

    @property
    def spec(self) -> EmbedderSpec:
        self.models()
        return self._spec

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.models().embedder.embed(texts)

    def refresh(self) -> None:
        """Read the index's embedder at the next use (a store call met another size)."""
        with self._lock:
            self._read_at = None

    def models(self) -> Models:
        """The current spec's models, the spec read again when it is older than the interval.
        A failed read keeps the spec known (Elasticsearch down must not stop embedding)."""
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._interval_s:
                self._read_at = now
                with contextlib.suppress(MemqError):
                    self._spec = self._read_spec() or self.default
            spec = self._spec
            if spec not in self._models:
                self._models[spec] = self._make(spec)
            return self._models[spec]


@dataclass(frozen=True)
class _Names:
    owner: IndexEmbedder

    @property
    def dims(self) -> int:
        return self.owner.models().names.dims

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.owner.models().names.embed(texts)


def spec_in_use(settings: EmbedderConfig, meta: Mapping[str, Any] | None) -> EmbedderSpec:
    """The embedder of the version in use: the one its ``_meta.embedder`` (``meta``) names,
    else the settings' (what a dump's header names, and what an import compares with)."""
    return EmbedderSpec.model_validate(meta) if meta else EmbedderSpec.of(settings)


def model_key(embedder: Embedder, default: str) -> str:
    """What names ``embedder``'s vectors in a cache shared between processes (the turns
    embedded ahead): the spec it follows now, else ``default``; the settings' spec gives the
    same key as ``default`` does (``workers.runtime.Runtime.vectors_kept_as``)."""
    if not isinstance(embedder, IndexEmbedder):
        return default
    spec = embedder.spec
    return f"{spec.kind}:{spec.base_url or ''}:{spec.model}:{spec.dims}"


def refresh_embedder(embedder: Embedder) -> None:
    """Have ``embedder`` read its index's embedder again, if it follows one."""
    if isinstance(embedder, IndexEmbedder):
        embedder.refresh()


def settings_models(settings: Settings) -> MakeModels:
    """How a process makes the models of a spec: its settings' embedder section with the
    spec's model, and a name cache of the settings' size."""
    from pipeline.adapters.embedding import make_embedder
    from pipeline.adapters.embedding.cache import CachedEmbedder

    def make(spec: EmbedderSpec) -> Models:
        changed = settings.model_copy(update={"embedder": spec.config(settings.embedder)})
        embedder = make_embedder(changed)
        size = settings.embedder.name_cache
        return Models(embedder, CachedEmbedder(embedder, size) if size else embedder)

    return make
