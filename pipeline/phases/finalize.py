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


def finalize_jobs_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Append each job's messages to its window and write its ``succeeded`` record: one read
    and one bulk for the batch. A webhook that fails is reported in its job's record; it does
    not fail the job."""
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
    deps.store.finish_jobs(entries, [job_record(s, JobStatus.SUCCEEDED, now) for s in states])
    return [notify(state, deps) for state in states]


def notify(state: JobState, deps: Deps) -> JobState:
    if state.request.webhook_url is None:
        return state
    payload = {
        "job_id": state.job_id,
        "status": JobStatus.SUCCEEDED.value,
        "results": [m.model_dump(mode="json") for m in state.stored],
    }
    failure = deps.webhooks.post(state.request.webhook_url, payload, state.request.scope.tenant)
    if failure is None:
        return state
    state = state.with_(errors=[*state.errors, ItemError(phase=Phase.FINALIZE, reason=failure)])
    deps.store.save_job(job_record(state, JobStatus.SUCCEEDED, deps.clock()))
    return state


finalize_jobs_batch = shared(finalize_jobs_of)
finalize_job = single(finalize_jobs_batch)
