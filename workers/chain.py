"""The one function that builds a batch's chain of phase tasks."""

from __future__ import annotations

from celery import Celery, chain

from pipeline.config import QueueConfig
from pipeline.domain.state import Phase
from pipeline.ingestion.phases import PHASES
from workers.names import phase_task_name
from workers.queues import queue_for


def batch_chain(
    app: Celery,
    batch_id: str,
    job_ids: list[str],
    queues: QueueConfig,
    *,
    backfill: bool = False,
    start: Phase = Phase.CONTEXT,
    fault_since: float | None = None,
) -> chain:
    """context → retrieve → … → finalize from ``start`` on, each task given the batch id and
    its job ids (what Flower shows as the task's arguments). ``fault_since`` goes to the first
    task only: a job sent on alone after a fault keeps the deadline of that fault."""
    phases = [spec.phase for spec in PHASES]
    return chain(
        *[
            app.signature(
                phase_task_name(spec.phase),
                args=(batch_id, job_ids),
                kwargs={"fault_since": fault_since} if fault_since and i == 0 else {},
                immutable=True,
                queue=queue_for(spec.workload, queues, backfill),
            )
            for i, spec in enumerate(PHASES[phases.index(start) :])
        ],
        app=app,
    )
