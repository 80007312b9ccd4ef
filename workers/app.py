"""The composition root: the Celery app built from ``Settings`` at process start (never at
import time), with every task registered on it. Only entry points (the API, the CLI, tests)
import this module; the app class itself lives in ``workers.runtime``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis
from celery.signals import setup_logging, worker_init, worker_process_init, worker_ready

from pipeline.config import Settings
from pipeline.telemetry import configure_tracing
from workers.chat import register_chat_tasks
from workers.failures import CeleryReports, Endings, record_failure
from workers.metrics import scrape_registry, serve_metrics
from workers.names import HEALTH_TASK
from workers.reprocess import register_reprocess_tasks
from workers.runtime import MemqCelery, celery_config
from workers.scheduler.core import CelerySender, Scheduler
from workers.tasks import register_tasks
from workers.webhooks import register_webhook_tasks

log = logging.getLogger("memq.worker")

__all__ = ["HEALTH_TASK", "MemqCelery", "celery_config", "create_celery"]


_cli_app: MemqCelery | None = None


def __getattr__(name: str) -> MemqCelery:
    """``app`` (and ``celery``): the app built from the environment's ``Settings`` on first
    access, for Celery's own command line (``celery -A workers.app inspect ping``), which
    looks for an attribute of either name. Importing this module still builds nothing."""
    global _cli_app  # noqa: PLW0603 - built once, on the command line's first access
    if name not in {"app", "celery"}:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _cli_app is None:
        _cli_app = create_celery(Settings())
    return _cli_app


def create_celery(settings: Settings) -> MemqCelery:
    """Build the app and register every task on it."""
    app = MemqCelery(settings)
    app.scheduler = scheduler_of(app)
    app.endings = endings_of(app)
    register_tasks(app)
    register_chat_tasks(app)
    register_webhook_tasks(app)
    register_reprocess_tasks(app)
    connect_warm_up(app)
    connect_tracing(app)
    keep_memq_logging()
    return app


def scheduler_of(app: MemqCelery) -> Scheduler:
    """The app's scheduler (``workers.scheduler.core``): its Redis state, the keeper, the
    worker settings, the job records (built on first use) and Celery to send its messages."""
    runtime = app.runtime
    return Scheduler(
        states=runtime.states,
        leases=runtime.leases,
        keeper=app.keeper,
        worker=runtime.settings.worker,
        sender=CelerySender(app, runtime.settings.queues, runtime.redis),
        clock=runtime.clock,
        records=lambda: runtime.store,
        fail_job=lambda job_id, exc: record_failure(app.endings, job_id, exc),
    )


def endings_of(app: MemqCelery) -> Endings:
    """How the app's jobs end (``workers.failures``): over its scheduler, its usage ledger and
    metrics, reporting through Celery tasks."""
    runtime = app.runtime
    return Endings(
        scheduler=app.scheduler,
        usage=runtime.usage,
        metrics=runtime.metrics,
        queues=runtime.settings.queues,
        reports=CeleryReports(app),
    )


def keep_memq_logging() -> None:
    """Leave the worker's logging as ``pipeline.logs.configure_logging`` set it at process
    start: Celery sets up none of its own while ``setup_logging`` has a receiver. (Its own would
    add handlers with its coloured text format to its task and multiprocessing loggers, whose
    lines would then not be JSON.) The worker's ``--loglevel`` still sets the level."""

    def keep(loglevel: int | str | None = None, **_: Any) -> None:
        if loglevel:
            logging.getLogger().setLevel(loglevel)

    setup_logging.connect(keep, weak=False, dispatch_uid="memq.keep_memq_logging")


def connect_warm_up(app: MemqCelery) -> None:
    """Load models and open clients when a worker starts, not on its first job: in each prefork
    child after the fork (never in the parent: model sessions do not survive a fork), and in the
    main process of a threads pool. The lease keeper (and with it the reaper) starts there too,
    in the processes that run tasks, so it dies with them."""

    def in_child(**_: Any) -> None:
        app.runtime.warm_up()
        app.keeper.start()

    def in_threads_worker(sender: Any = None, **_: Any) -> None:
        if "thread" in str(getattr(sender, "pool_cls", "")).lower():
            app.runtime.warm_up()
            app.keeper.start()

    worker_process_init.connect(in_child, weak=False)
    worker_init.connect(in_threads_worker, weak=False)


def connect_metrics_server(app: MemqCelery, path: str, queues: Sequence[str]) -> None:
    """Serve the worker's metrics (every process's files under ``path``, and the depths of
    ``queues``) from its main process once the pool is up, on ``MEMQ_WORKER_METRICS_PORT``."""
    config = app.runtime.settings.worker

    def start(**_: Any) -> None:
        client = redis.Redis.from_url(app.runtime.settings.redis.url)
        registry = scrape_registry(path, client, queues)
        try:
            serve_metrics(config.metrics_host, config.metrics_port, registry)
        except OSError as exc:  # the worker still runs; its metrics are missing, and said so
            log.error(
                "worker metrics: cannot listen on %s:%d (%s); set another port with "
                "--metrics-port or MEMQ_WORKER_METRICS_PORT",
                config.metrics_host,
                config.metrics_port,
                exc,
            )

    worker_ready.connect(start, weak=False)


def connect_tracing(app: MemqCelery) -> None:
    """Trace tasks when an OTLP endpoint is configured (``pipeline.telemetry``): in each
    prefork child after the fork, or in the main process of a threads pool. The Celery
    instrumentation continues the trace a message carries (the API request, or the task that
    sent it), so one job is one trace from the API through every task to Elasticsearch."""

    def start(**_: Any) -> None:
        if configure_tracing(app.runtime.settings, "memq-worker"):
            from opentelemetry.instrumentation.celery import CeleryInstrumentor

            CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]

    def in_threads_worker(sender: Any = None, **_: Any) -> None:
        if "thread" in str(getattr(sender, "pool_cls", "")).lower():
            start()

    worker_process_init.connect(start, weak=False)
    worker_init.connect(in_threads_worker, weak=False)
