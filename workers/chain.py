"""The one function that builds a job's chain of tasks."""

from __future__ import annotations

from celery import Celery, chain
from celery.canvas import Signature

from pipeline.config import QueueConfig
from pipeline.phases import PHASES, Workload
from workers.names import WAIT_TASK, phase_task_name


def queue_for(workload: Workload, queues: QueueConfig, backfill: bool) -> str:
    """Backfill jobs keep to their own queue so live traffic is never starved by them."""
    if backfill:
        return queues.backfill
    return queues.cpu if workload is Workload.CPU else queues.io


def job_chain(
    app: Celery, job_id: str, queues: QueueConfig, backfill: bool = False, wait: bool = True
) -> chain:
    """wait_turn → context → retrieve → … → finalize, each task given only the job id. Without
    ``wait`` (the job was first in an idle session's line), the chain starts at context."""
    steps: list[Signature] = []
    if wait:
        steps.append(
            app.signature(
                WAIT_TASK,
                args=(job_id,),
                immutable=True,
                queue=queue_for(Workload.IO, queues, backfill),
            )
        )
    steps += [
        app.signature(
            phase_task_name(spec.phase),
            args=(job_id,),
            immutable=True,
            queue=queue_for(spec.workload, queues, backfill),
        )
        for spec in PHASES
    ]
    return chain(*steps, app=app)
