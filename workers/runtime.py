"""The Celery application class and the per-process resources its tasks share.

``MemqCelery`` carries a ``Runtime``: settings and lazily built clients, built on first use
per process, so a forked worker child never shares a connection (or a model session) with its
parent. Tasks are registered on the app elsewhere (``workers.tasks``); ``workers.app`` puts the
two together. This module imports no task module, so nothing here can form an import cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

import redis
from celery import Celery
from elasticsearch import Elasticsearch

from pipeline.adapters.embedding.shared import SharedVectors
from pipeline.config import Settings
from pipeline.domain.models import utcnow
from pipeline.domain.protocols import Embedder
from pipeline.features.usage_redis import RedisUsage
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases import PHASES
from pipeline.services import (
    build_deps,
    build_store,
    make_reranker,
    make_searcher,
    webhook_sender,
)
from pipeline.serving.search import Searcher
from pipeline.store.client import make_client
from pipeline.store.elastic import ElasticStore
from workers.chat_buffer import ChatBuffer
from workers.metrics import WorkerMetrics
from workers.names import (
    CHAT_FLUSH_TASK,
    GATHER_TASK,
    HEALTH_TASK,
    PREPARE_TASK,
    RECORD_TASK,
    REPROCESS_TASK,
    phase_task_name,
)
from workers.queues import queue_for
from workers.scheduler.core import Scheduler
from workers.scheduler.keeper import Keeper
from workers.scheduler.leases import RunLeases
from workers.scheduler.state_store import RedisStateStore

if TYPE_CHECKING:
    from workers.failures import Endings

log = logging.getLogger("memq.worker")

# made in pipeline.services (the API builds the same), and still importable from here
__all__ = ["MemqCelery", "Runtime", "build_deps", "make_reranker", "webhook_sender"]


class MemqCelery(Celery):
    """A Celery app that carries memq's per-process ``Runtime`` (settings and clients)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("memq", set_as_current=False)
        self.runtime = Runtime(settings)
        self.conf.update(celery_config(settings))
        # the reaper is set where the tasks are registered (workers.tasks): it sends them
        self.keeper = Keeper(lambda: self.runtime.leases, settings.worker, reap=lambda: None)

    # the scheduler over this process's Redis, keeper and broker, built with the app
    # (``workers.app.create_celery``: it also needs how a job fails, ``workers.failures``)
    scheduler: Scheduler
    # how a job that cannot go on ends (``workers.failures``), built with the scheduler
    endings: Endings


@dataclass
class Parking:
    """What one process knows of the jobs it parked (``workers.intake.park``): ``pending``
    while some may not have joined their lines yet; its submits park too until a drain finds
    none left, so a session's jobs join their line in the order they were accepted."""

    pending: bool = False


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
    def leases(self) -> RunLeases:
        return RunLeases(self.redis, self.settings.es.index_prefix)

    @cached_property
    def parking(self) -> Parking:
        return Parking()

    @cached_property
    def chat_buffer(self) -> ChatBuffer:
        return ChatBuffer(self.redis, self.settings.es.index_prefix)

    @cached_property
    def store(self) -> ElasticStore:
        return build_store(self.settings, self.es)

    @cached_property
    def metrics(self) -> WorkerMetrics:
        return WorkerMetrics()

    @cached_property
    def usage(self) -> RedisUsage:
        """Per-tenant usage and budgets (``pipeline.features.usage``), in this process's Redis."""
        return RedisUsage(self.redis, self.settings.es.index_prefix)

    @cached_property
    def deps(self) -> Deps:
        deps = build_deps(self.settings, self.store, self.clock, self.metrics.llm_call)
        deps = replace(deps, usage=self.usage)
        if not self.settings.worker.embed_ahead:
            return deps
        return replace(deps, queries=self.shared_vectors(deps.embedder))

    def shared_vectors(self, embedder: Embedder) -> SharedVectors:
        """The query embedder of every worker process: finds the turns embedded ahead."""
        return SharedVectors(embedder, self.redis, *self.vectors_kept_as())

    def vectors_kept_as(self) -> tuple[str, str]:
        """(key prefix, model) under which the turns embedded ahead are kept."""
        config = self.settings.embedder
        model = f"{config.kind}:{config.base_url or ''}:{config.model}:{config.dims}"
        return f"memq:{self.settings.es.index_prefix}", model

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
        return make_searcher(self.settings, self.store, self.deps, self.clock)


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings: at-least-once delivery, JSON only, routing per queue."""
    queues = settings.queues
    return {
        "broker_url": settings.redis.url,
        "result_backend": settings.redis.url,
        # A worker waits out a broker outage of any length (the consumer retries 2, 4, ... s
        # apart, then every 30 s): exiting would only hand the wait to its supervisor.
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,
        # Tasks running when the connection drops finish (their work is kept, their hand-on
        # waits for the broker); cancelling them would only redo it (Celery 6's default).
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "broker_transport_options": {"visibility_timeout": settings.worker.visibility_timeout_s},
        "result_backend_transport_options": {
            "visibility_timeout": settings.worker.visibility_timeout_s
        },
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_track_started": True,
        "task_send_sent_event": True,
        "worker_send_task_events": True,
        "task_default_queue": queues.io,
        "task_time_limit": settings.worker.task_time_limit_s,
        "task_soft_time_limit": settings.worker.task_soft_time_limit_s,
        "result_expires": 86_400,
        "worker_hijack_root_logger": False,
        "task_routes": task_routes(settings),
    }


def task_routes(settings: Settings) -> dict[str, dict[str, str]]:
    """Default queue per task name (a chain may still send a backfill batch elsewhere)."""
    queues = settings.queues
    routes = {
        HEALTH_TASK: {"queue": queues.io},
        GATHER_TASK: {"queue": queues.io},
        CHAT_FLUSH_TASK: {"queue": queues.io},
        RECORD_TASK: {"queue": queues.io},
        PREPARE_TASK: {"queue": queues.cpu},
        REPROCESS_TASK: {"queue": queues.backfill},  # long: the lane that may wait
    }
    for spec in PHASES:
        routes[phase_task_name(spec.phase)] = {"queue": queue_for(spec.workload, queues, False)}
    return routes
