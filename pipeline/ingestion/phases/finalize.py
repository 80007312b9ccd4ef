"""Phase 8: save the new messages to the session windows and record the jobs; then, in a task
of their own per tenant, their webhooks (``notify_jobs``)."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.domain.jobs import JobRecord, JobStatus, job_record
from pipeline.domain.models import ContextMessage
from pipeline.domain.state import ItemError, JobState, Phase
from pipeline.features.usage import charge_of
from pipeline.features.webhook import Delivery
from pipeline.ingestion.batch import shared, single
from pipeline.ingestion.deps import Deps
from pipeline.store.protocol import SessionMessages


def finalize_jobs_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Append each job's messages to its window and write its ``succeeded`` record: one read
    and one bulk for the batch, then charge each job's usage to its tenant (once per run,
    however often this is called: ``pipeline.features.usage``). Webhooks are not sent here: the
    workers hand each tenant's to a delivery task of its own (``notify_jobs``), so no receiver holds
    the batch."""
    entries = [
        SessionMessages(
            scope=s.request.scope,
            job_id=s.job_id,
            messages=[
                ContextMessage(role=m.role.value, content=m.text(), name=m.name)
                for m in s.request.messages
            ],
            at=s.request.timestamp or s.received_at,
        )
        for s in states
    ]
    now = deps.clock()
    records = [job_record(s, JobStatus.SUCCEEDED, now) for s in states]
    deps.store.finish_jobs(entries, records)
    if deps.usage is not None:
        deps.usage.charge([charge_of(record) for record in records])
    return list(states)


def notify_jobs(job_ids: Sequence[str], deps: Deps) -> list[str]:
    """Send the webhooks of the succeeded jobs among ``job_ids`` (one tenant's, from one
    batch), built from their records, all at once under one deadline
    (``WebhookSender.post_all``); a failure is added to its job's record, it does not fail
    the job. Returns the ids of the jobs whose webhook was delivered. At least once: a retried
    call sends again."""
    found = deps.store.get_jobs(job_ids).values()
    asked = [r for r in found if r is not None and r.status is JobStatus.SUCCEEDED and _url(r)]
    reasons = deps.webhooks.post_all([delivery(r) for r in asked])
    for record, reason in zip(asked, reasons, strict=True):
        if reason is not None:
            failed_delivery(record, reason, deps)
    return [r.job_id for r, reason in zip(asked, reasons, strict=True) if reason is None]


def failed_delivery(record: JobRecord, reason: str, deps: Deps) -> None:
    """``record`` written again with the webhook's failure among its errors."""
    error = ItemError(phase=Phase.FINALIZE, reason=reason)
    errors = [*record.errors, error.model_dump(mode="json", exclude_none=True)]
    update = {"errors": errors, "updated_at": deps.clock()}
    deps.store.save_job(record.model_copy(update=update))


def _url(record: JobRecord) -> str | None:
    url = record.request.get("webhook_url")
    return url if isinstance(url, str) else None


def delivery(record: JobRecord) -> Delivery:
    payload = {
        "job_id": record.job_id,
        "status": JobStatus.SUCCEEDED.value,
        "results": [m.model_dump(mode="json") for m in record.results],
    }
    return Delivery(_url(record) or "", payload, record.tenant)


finalize_jobs_batch = shared(finalize_jobs_of)
finalize_job = single(finalize_jobs_batch)
