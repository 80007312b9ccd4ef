"""Phase 8: save the new messages to the session windows, record the jobs, fire their
webhooks."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.batch import shared, single
from pipeline.deps import Deps
from pipeline.jobs import JobStatus, job_record
from pipeline.models import ContextMessage
from pipeline.state import ItemError, JobState, Phase
from pipeline.store.protocol import SessionMessages
from pipeline.usage import charge_of
from pipeline.webhook import Delivery


def finalize_jobs_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Append each job's messages to its window and write its ``succeeded`` record: one read
    and one bulk for the batch. A webhook that fails is reported in its job's record; it does
    not fail the job. Then each job's usage is charged to its tenant (once per run, however
    often this is called: ``pipeline.usage``)."""
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
    return notify(states, deps)


def notify(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Send the webhooks of ``states`` all at once (``WebhookSender.post_all``: one tenant's
    slow receiver delays no other's, and the phase waits at most one delivery's deadline);
    a failure is recorded in its job's record."""
    asked = [s for s in states if s.request.webhook_url is not None]
    reasons = deps.webhooks.post_all([delivery(s) for s in asked])
    failed = {s.job_id: r for s, r in zip(asked, reasons, strict=True) if r is not None}
    return [failed_delivery(s, failed[s.job_id], deps) if s.job_id in failed else s for s in states]


def failed_delivery(state: JobState, reason: str, deps: Deps) -> JobState:
    """``state`` with the webhook's failure among its errors, recorded."""
    state = state.with_(errors=[*state.errors, ItemError(phase=Phase.FINALIZE, reason=reason)])
    deps.store.save_job(job_record(state, JobStatus.SUCCEEDED, deps.clock()))
    return state


def delivery(state: JobState) -> Delivery:
    payload = {
        "job_id": state.job_id,
        "status": JobStatus.SUCCEEDED.value,
        "results": [m.model_dump(mode="json") for m in state.stored],
    }
    return Delivery(state.request.webhook_url or "", payload, state.request.scope.tenant)


finalize_jobs_batch = shared(finalize_jobs_of)
finalize_job = single(finalize_jobs_batch)
