"""Which queue a task goes to."""

from __future__ import annotations

from pipeline.config import QueueConfig
from pipeline.ingestion.phases import Workload


def queue_for(workload: Workload, queues: QueueConfig, backfill: bool) -> str:
    """Backfill jobs keep to their own queue so live traffic is never starved by them."""
    if backfill:
        return queues.backfill
    return queues.cpu if workload is Workload.CPU else queues.io
