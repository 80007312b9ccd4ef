"""What the phases run with: the store, the models and a clock, bundled once per process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from pipeline.domain.models import utcnow
from pipeline.domain.protocols import LLM, Embedder, EntityExtractor, Lemmatizer
from pipeline.features.usage import UsageLedger
from pipeline.features.webhook import WebhookSender
from pipeline.store.protocol import Store


@dataclass(frozen=True)
class Limits:
    """Sizes the phases work with (from DESIGN: a window of 10 messages, top-10 memories)."""

    context_messages: int = 10
    retrieved_memories: int = 10
    entity_merge_similarity: float = 0.95
    llm_concurrency: int = 16  # LLM calls one batch makes at once (the adapter bounds them too)


@dataclass(frozen=True)
class Deps:
    """Everything a phase needs besides the job state. ``llm`` is None when none is configured:
    then only infer=False jobs can run. ``names`` embeds entity names (``embedder`` when
    unset; the services give it a cache, ``pipeline.adapters.embedding.cache``). ``queries`` embeds
    the new turns retrieval searches with (``embedder`` when unset; a worker's finds the turns
    embedded ahead, ``pipeline.adapters.embedding.shared``). ``usage`` is where ended jobs are
    charged and budgets are read (``pipeline.features.usage``); None counts nothing and caps
    nothing."""

    store: Store
    embedder: Embedder
    lemmatizer: Lemmatizer
    entities: EntityExtractor
    llm: LLM | None
    vision: bool = False
    limits: Limits = field(default_factory=Limits)
    clock: Callable[[], datetime] = utcnow
    webhooks: WebhookSender = field(default_factory=WebhookSender)
    names: Embedder | None = None
    queries: Embedder | None = None
    usage: UsageLedger | None = None

    @property
    def query_embedder(self) -> Embedder:
        return self.queries or self.embedder

    @property
    def name_embedder(self) -> Embedder:
        return self.names or self.embedder
