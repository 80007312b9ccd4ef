"""``memq demo``: prove the running stack does its job, printing each step."""

from __future__ import annotations

from pipeline.config import Settings


def run_demo(settings: Settings, timeout_s: float) -> int:
    """Round-trip a task through a worker. Returns a process exit status."""
    from workers.app import HEALTH_TASK, create_celery

    reply = create_celery(settings).send_task(HEALTH_TASK).get(timeout=timeout_s)
    print(f"demo: worker {reply['worker']} sees Elasticsearch {reply['elasticsearch']}")
    return 0
