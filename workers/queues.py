"""Which queue a task goes to."""

from __future__ import annotations

from typing import Any, Protocol

from pipeline.config import QueueConfig
from pipeline.ingestion.phases import Workload


def queue_for(workload: Workload, queues: QueueConfig, backfill: bool) -> str:
    """Backfill jobs keep to their own queue so live traffic is never starved by them."""
    if backfill:
        return queues.backfill
    return queues.cpu if workload is Workload.CPU else queues.io


class TaskSender(Protocol):
    """What sends a task by name: a Celery app (``Celery.send_task``). kombu's
    ``OperationalError`` when the broker refuses the message."""

    def send_task(
        self,
        name: str,
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        countdown: float | None = None,
        *,
        queue: str | None = None,
        task_id: str | None = None,
    ) -> Any: ...
