"""The serving side's resources for one ``Settings``: the store, the API keys, the search, the
phases' dependencies and the clock, each built on first use and kept for the process.

Building a ``Services`` touches nothing: the store (and with it the indices) is made by the
first call that needs it, so a process starts, and ``memq openapi`` runs, with Elasticsearch
down; a request that needs the node then fails as a ``TransientError`` (a 503), and the next
one tries again. ``build_deps`` is also how the workers' runtime makes the phases'
dependencies, so both sides run with the same models.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cached_property

import redis
from elasticsearch import Elasticsearch

from pipeline.adapters.embedding.versioned import EmbedderSpec, IndexEmbedder, settings_models
from pipeline.adapters.llm.openai_llm import LLMObserver, OpenAILLM
from pipeline.adapters.nlp.entities import RuleEntityExtractor
from pipeline.adapters.nlp.lemmatize import SimplemmaLemmatizer
from pipeline.config import Settings
from pipeline.domain.models import utcnow
from pipeline.features.webhook import WebhookSender, parse_allow_list
from pipeline.ingestion.deps import Deps, Limits
from pipeline.serving.keys import KeyStore, RedisKeyCreations
from pipeline.serving.search import Reranker, Searcher
from pipeline.store.client import make_client
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import ensure_indices

Clock = Callable[[], datetime]


class Services:
    """What serving requests needs, for ``settings`` (see the module's docstring)."""

    def __init__(
        self, settings: Settings, clock: Clock = utcnow, miss_refresh_interval_s: float = 0.0
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.miss_refresh_interval_s = miss_refresh_interval_s  # ``ElasticStore``'s

    @cached_property
    def store(self) -> ElasticStore:
        """The store, its indices made or checked on first use."""
        return build_store(
            self.settings, make_client(self.settings.es), self.miss_refresh_interval_s
        )

    @cached_property
    def keys(self) -> KeyStore:
        api = self.settings.api
        redis_client = redis.Redis.from_url(self.settings.redis.url)  # connects on first use
        creations = RedisKeyCreations(redis_client, self.settings.es.index_prefix)
        return KeyStore(self.store, api.key_cache_s, api.key_stale_s, creations)

    @cached_property
    def deps(self) -> Deps:
        return build_deps(self.settings, self.store, self.clock)

    @cached_property
    def searcher(self) -> Searcher:
        return make_searcher(self.settings, self.store, self.deps, self.clock)


def build_store(
    settings: Settings, client: Elasticsearch, miss_refresh_interval_s: float = 0.0
) -> ElasticStore:
    """The store over ``client``, its indices made or checked now: how the API and the workers
    both build theirs."""
    names = ensure_indices(client, settings.es, settings.embedder.dims)
    return ElasticStore(client, names, miss_refresh_interval_s)


def make_searcher(
    settings: Settings, store: ElasticStore, deps: Deps, clock: Clock = utcnow
) -> Searcher:
    """The hybrid searcher over ``store`` with the phases' models (the API's and the workers')."""
    return Searcher(
        store=store,
        embedder=deps.embedder,
        lemmatizer=deps.lemmatizer,
        entities=deps.entities,
        config=settings.search,
        entity_similarity=deps.limits.entity_merge_similarity,
        reranker=make_reranker(settings),
        clock=clock,
    )


def make_reranker(settings: Settings) -> Reranker | None:
    """The configured reranker, or None (rerank is off unless ``MEMQ_RERANK_URL`` is set)."""
    if settings.rerank.url is None:
        return None
    from pipeline.serving.rerank import HttpReranker

    return HttpReranker(settings.rerank)


def build_deps(
    settings: Settings,
    store: ElasticStore,
    clock: Clock,
    llm_observer: LLMObserver | None = None,
) -> Deps:
    """The phases' dependencies for ``settings``: the configured embedder and LLM (None when
    no LLM is configured; ``llm_observer`` sees each of its requests), the lemmatizer and the
    entity extractor."""
    llm = (
        OpenAILLM(settings.llm, settings.llm_api_key(), observer=llm_observer)
        if settings.llm_configured()
        else None
    )
    embedder = index_embedder(settings, store)
    return Deps(
        store=store,
        embedder=embedder,
        names=embedder.names,
        lemmatizer=SimplemmaLemmatizer(),
        entities=RuleEntityExtractor(),
        llm=llm,
        vision=settings.llm.vision,
        limits=Limits(llm_concurrency=settings.llm.max_concurrency),
        clock=clock,
        webhooks=webhook_sender(settings),
    )


def index_embedder(settings: Settings, store: ElasticStore) -> IndexEmbedder:
    """The embedder of the index version in use (``pipeline.adapters.embedding.versioned``): the
    settings' until an index names another."""

    def read_spec() -> EmbedderSpec | None:
        meta = store.embedder_meta()
        return EmbedderSpec.model_validate(meta) if meta else None

    return IndexEmbedder(EmbedderSpec.of(settings.embedder), read_spec, settings_models(settings))


def webhook_sender(settings: Settings) -> WebhookSender:
    """Job webhooks as the settings allow and sign them."""
    config = settings.webhook
    secret = config.signing_secret.get_secret_value() if config.signing_secret else None
    return WebhookSender(
        allow=parse_allow_list(config.allow), signing_secret=secret, timeout_s=config.timeout_s
    )
