"""Per-process resources shared by the tasks of one worker: settings and lazily built clients.

Built on first use, per process, so a forked worker child never shares a connection (or a model
session) with its parent."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING

import redis
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.deps import Deps
from pipeline.models import utcnow
from pipeline.search import Reranker, Searcher
from pipeline.store.client import make_client
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import ensure_indices
from workers.state_store import RedisStateStore

if TYPE_CHECKING:
    from workers.chat import ChatBuffer

log = logging.getLogger("memq.worker")


class Runtime:
    """What a task needs besides its message."""

    def __init__(self, settings: Settings, clock: Callable[[], datetime] = utcnow) -> None:
        self.settings = settings
        self.clock = clock

    @cached_property
    def es(self) -> Elasticsearch:
        return make_client(self.settings.es)

    @cached_property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.settings.redis.url)

    @cached_property
    def states(self) -> RedisStateStore:
        return RedisStateStore(self.redis, self.settings.es.index_prefix)

    @cached_property
    def chat_buffer(self) -> ChatBuffer:
        from workers.chat import ChatBuffer

        return ChatBuffer(self.redis, self.settings.es.index_prefix)

    @cached_property
    def store(self) -> ElasticStore:
        names = ensure_indices(self.es, self.settings.es, self.settings.embedder.dims)
        return ElasticStore(self.es, names)

    @cached_property
    def deps(self) -> Deps:
        return build_deps(self.settings, self.store, self.clock)

    def warm_up(self) -> None:
        """Build the clients and load the models now (a worker's first job is then as fast as
        its next). Failures are left for the first task to meet and report."""
        try:
            deps = self.deps
            deps.embedder.embed(["warm up"])
            deps.lemmatizer.lemmatize("warm up")
            deps.entities.extract(["Warm Up"])
        except Exception as exc:
            log.warning("warm-up failed (the first task will retry it): %s", exc)

    @cached_property
    def searcher(self) -> Searcher:
        deps = self.deps
        return Searcher(
            store=self.store,
            embedder=deps.embedder,
            lemmatizer=deps.lemmatizer,
            entities=deps.entities,
            config=self.settings.search,
            entity_similarity=deps.limits.entity_merge_similarity,
            reranker=make_reranker(self.settings),
        )


def make_reranker(settings: Settings) -> Reranker | None:
    """The configured reranker, or None (rerank is off unless ``MEMQ_RERANK_URL`` is set)."""
    if settings.rerank.url is None:
        return None
    from pipeline.rerank import HttpReranker

    return HttpReranker(settings.rerank)


def build_deps(settings: Settings, store: ElasticStore, clock: Callable[[], datetime]) -> Deps:
    """The phases' dependencies for ``settings``: the configured embedder and LLM (None when
    no LLM is configured), the lemmatizer and the entity extractor."""
    from pipeline.embedding import make_embedder
    from pipeline.llm.openai_llm import OpenAILLM
    from pipeline.nlp.entities import RuleEntityExtractor
    from pipeline.nlp.lemmatize import SimplemmaLemmatizer

    llm = OpenAILLM(settings.llm, settings.llm_api_key()) if settings.llm_configured() else None
    return Deps(
        store=store,
        embedder=make_embedder(settings),
        lemmatizer=SimplemmaLemmatizer(),
        entities=RuleEntityExtractor(),
        llm=llm,
        vision=settings.llm.vision,
        clock=clock,
    )
