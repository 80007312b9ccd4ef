"""Job webhooks, out of the batch: a delivery task per tenant.

Finalize records a batch's jobs and returns; then ``send_webhooks`` sends one
``memq.job.webhooks`` task per tenant of the batch that asked for webhooks, carrying job ids
only (the task builds each payload from the job's record: no memory text in the broker).
Each task posts its tenant's deliveries at once under ``MEMQ_WEBHOOK_TIMEOUT_S`` of wall-clock
time (``WebhookSender.post_all``), so a slow or hostile receiver holds its own tenant's task
for at most that deadline: never the batch, its session's next job, nor another tenant's
notifications. A broker that cannot take the tasks fails the finalize task, which is retried
(the jobs are recorded again, the same; a webhook may come twice: at least once).
"""

from __future__ import annotations

from collections.abc import Sequence

from celery import Task

from pipeline.config import QueueConfig
from pipeline.domain.state import JobState
from pipeline.ingestion.phases import Workload
from pipeline.ingestion.phases.finalize import notify_jobs
from workers.names import WEBHOOKS_TASK
from workers.queues import TaskSender, queue_for
from workers.retry import RetryPolicy, retried
from workers.runtime import MemqCelery


def send_webhooks(sender: TaskSender, queues: QueueConfig, states: Sequence[JobState]) -> None:
    """One delivery task for each tenant among ``states`` whose jobs asked for a webhook."""
    by_tenant: dict[str, list[str]] = {}
    for state in states:
        if state.request.webhook_url is not None:
            by_tenant.setdefault(state.request.scope.tenant, []).append(state.job_id)
    queue = queue_for(Workload.IO, queues, backfill=False)
    for tenant, job_ids in by_tenant.items():
        sender.send_task(WEBHOOKS_TASK, kwargs={"tenant": tenant, "job_ids": job_ids}, queue=queue)


def register_webhook_tasks(app: MemqCelery) -> None:
    """``memq.job.webhooks`` (see the module's docstring)."""
    runtime = app.runtime
    policy = RetryPolicy.of(runtime.settings.worker)

    @app.task(name=WEBHOOKS_TASK, bind=True, max_retries=None, shared=False)
    def deliver_webhooks(
        self: Task,  # type: ignore[type-arg]
        *,
        tenant: str,
        job_ids: list[str],
        fault_since: float | None = None,
    ) -> list[str]:
        """Post the webhooks of ``tenant``'s jobs ``job_ids``; returns those delivered. A
        record that cannot be read or written is retried against the deadline."""
        with retried(self, policy):
            return notify_jobs(job_ids, runtime.deps)
