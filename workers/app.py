"""The composition root: the Celery app built from ``Settings`` at process start (never at
import time), with every task registered on it. Only entry points (the API, the CLI, tests)
import this module; the app class itself lives in ``workers.runtime``."""

from __future__ import annotations

from typing import Any

from celery.signals import worker_init, worker_process_init

from pipeline.config import Settings
from workers.chat import register_chat_tasks
from workers.names import HEALTH_TASK
from workers.runtime import MemqCelery, celery_config
from workers.tasks import register_tasks

__all__ = ["HEALTH_TASK", "MemqCelery", "celery_config", "create_celery"]


def create_celery(settings: Settings) -> MemqCelery:
    """Build the app and register every task on it."""
    app = MemqCelery(settings)
    register_tasks(app)
    register_chat_tasks(app)
    connect_warm_up(app)
    return app


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
