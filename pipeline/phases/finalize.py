"""Phase 8: save the new messages to the session window, record the job, fire its webhook."""

from __future__ import annotations

from pipeline.deps import Deps
from pipeline.jobs import job_record
from pipeline.models import ContextMessage
from pipeline.state import ItemError, JobState, JobStatus, Phase


def finalize_job(state: JobState, deps: Deps) -> JobState:
    """Append this job's messages to the window and write the ``succeeded`` job record.
    A webhook that fails is reported in the record; it does not fail the job."""
    request = state.request
    window = [
        ContextMessage(role=m.role.value, content=m.text(), name=m.name) for m in request.messages
    ]
    deps.store.append_messages(
        request.scope, state.job_id, window, request.timestamp or state.received_at
    )
    deps.store.save_job(job_record(state, JobStatus.SUCCEEDED, deps.clock()))
    if request.webhook_url is None:
        return state
    payload = {
        "job_id": state.job_id,
        "status": JobStatus.SUCCEEDED.value,
        "results": [m.model_dump(mode="json") for m in state.stored],
    }
    failure = deps.webhooks.post(request.webhook_url, payload, request.scope.tenant)
    if failure is None:
        return state
    state = state.with_(errors=[*state.errors, ItemError(phase=Phase.FINALIZE, reason=failure)])
    deps.store.save_job(job_record(state, JobStatus.SUCCEEDED, deps.clock()))
    return state
