"""The Celery application, built from ``Settings`` at process start (never at import time)."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_process_init

from pipeline.config import Settings
from pipeline.phases import PHASES
from workers.chain import queue_for
from workers.chat import register_chat_tasks
from workers.names import CHAT_FLUSH_TASK, HEALTH_TASK, WAIT_TASK, phase_task_name
from workers.runtime import Runtime
from workers.tasks import register_tasks

__all__ = ["HEALTH_TASK", "MemqCelery", "celery_config", "create_celery"]


class MemqCelery(Celery):
    """A Celery app that carries memq's per-process ``Runtime`` (settings and clients)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("memq", set_as_current=False)
        self.runtime = Runtime(settings)


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings: at-least-once delivery, JSON only, routing per queue."""
    queues = settings.queues
    return {
        "broker_url": settings.redis.url,
        "result_backend": settings.redis.url,
        "broker_connection_retry_on_startup": True,
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
    """Default queue per task name (a chain may still send a backfill job elsewhere)."""
    queues = settings.queues
    routes = {
        HEALTH_TASK: {"queue": queues.io},
        WAIT_TASK: {"queue": queues.io},
        CHAT_FLUSH_TASK: {"queue": queues.io},
    }
    for spec in PHASES:
        routes[phase_task_name(spec.phase)] = {"queue": queue_for(spec.workload, queues, False)}
    return routes


def create_celery(settings: Settings) -> MemqCelery:
    """Build the app and register every task on it."""
    app = MemqCelery(settings)
    app.conf.update(celery_config(settings))
    register_tasks(app)
    register_chat_tasks(app)
    connect_warm_up(app)
    return app


def connect_warm_up(app: MemqCelery) -> None:
    """Load models and open clients when a worker starts, not on its first job: in each prefork
    child after the fork (never in the parent: model sessions do not survive a fork), and in the
    main process of a threads pool."""

    def in_child(**_: Any) -> None:
        app.runtime.warm_up()

    def in_threads_worker(sender: Any = None, **_: Any) -> None:
        if "thread" in str(getattr(sender, "pool_cls", "")).lower():
            app.runtime.warm_up()

    worker_process_init.connect(in_child, weak=False)
    worker_init.connect(in_threads_worker, weak=False)
