"""Accepting jobs: the same path for the API, the CLI and backfills.

``submit`` answers in milliseconds: it claims the job id (atomic, so a conversation posted twice
is one job), writes the ``queued`` record and the state, joins the session's line and, when
its session was idle, makes the job ready for the next batch (behind others, the job ahead
starts it). Nothing runs here.
"""

from __future__ import annotations

import uuid
from typing import Any

from kombu.exceptions import OperationalError

from pipeline.chat import ChatEvent
from pipeline.config import Settings
from pipeline.errors import InvalidInputError, TransientError
from pipeline.intake import Accepted
from pipeline.jobs import JobRecord, JobStatus, job_record
from pipeline.models import NAMESPACE, AddRequest
from pipeline.state import JobState
from workers.batches import make_ready
from workers.erase import erase_user_everywhere
from workers.runtime import MemqCelery

__all__ = ["Accepted", "CeleryIntake", "celery_intake", "replay", "submit"]


def job_id_for(request: AddRequest, idempotency_key: str | None) -> str:
    """The caller's Idempotency-Key (per tenant) if given, else a hash of the conversation."""
    if idempotency_key is None:
        return request.job_id()
    return str(uuid.uuid5(NAMESPACE, f"idempotency\x1f{request.scope.tenant}\x1f{idempotency_key}"))


def submit(
    app: MemqCelery,
    request: AddRequest,
    idempotency_key: str | None = None,
    batch_id: str | None = None,
    backfill: bool = False,
) -> Accepted:
    """Accept ``request`` as a job, or return the job it already is."""
    runtime = app.runtime
    job_id = job_id_for(request, idempotency_key)
    existing = runtime.store.get_job(job_id)
    if existing is not None:
        return Accepted(existing, created=False)
    if not runtime.states.claim(job_id):  # the same job is being accepted right now
        return Accepted(in_flight_record(app, job_id, request), created=False)
    state = JobState(job_id=job_id, request=request, received_at=runtime.clock(), batch_id=batch_id)
    return Accepted(enqueue(app, state, backfill), created=True)


def in_flight_record(app: MemqCelery, job_id: str, request: AddRequest) -> JobRecord:
    record = app.runtime.store.get_job(job_id)
    if record is None:  # claimed a moment ago by a concurrent request, not yet written
        now = app.runtime.clock()
        state = JobState(job_id=job_id, request=request, received_at=now)
        record = job_record(state, JobStatus.QUEUED, now)
    return record


def enqueue(app: MemqCelery, state: JobState, backfill: bool) -> JobRecord:
    """State, then the session line, then the start, then the ``queued`` record: a crash
    before the start leaves no record (the id can be submitted again once its claim expires),
    and a crash after it leaves a job that runs and records itself."""
    runtime = app.runtime
    state = state.with_(backfill=backfill)
    record = job_record(state, JobStatus.QUEUED, runtime.clock())
    runtime.states.save(state)
    idle = runtime.states.enter_line(state.request.scope.key, state.job_id, runtime.clock())
    try:
        start(app, state.job_id, backfill, idle)
    except (OperationalError, TransientError) as exc:
        runtime.states.leave_line(state.request.scope.key, state.job_id)
        runtime.states.unclaim(state.job_id)
        raise TransientError(f"could not enqueue job {state.job_id}: {exc}") from exc
    runtime.store.create_job(record)
    return record


def start(app: MemqCelery, job_id: str, backfill: bool, idle: bool) -> None:
    """First in an idle session's line: nobody else will start this job, so it is ready now.
    Behind others: nothing to send. The job ahead of it makes it ready when it ends (the
    hand-on, ``workers.turns``), and the reaper's walk of the lines catches a lost hand-on."""
    if idle:
        make_ready(app, job_id, backfill)


def replay(app: MemqCelery, job_id: str) -> JobRecord:
    """Run a ``dead`` or ``failed`` job again from its recorded request, on the queue it ran on
    (a backfill job stays on the backfill queue). A job left ``queued`` with no state behind it
    (its intake died before enqueueing) replays too."""
    runtime = app.runtime
    record = runtime.store.get_job(job_id)
    if record is None:
        raise InvalidInputError(f"no job {job_id}", field="job_id")
    lost = record.status == JobStatus.QUEUED and not runtime.states.exists(job_id)
    if record.status not in (JobStatus.DEAD, JobStatus.FAILED) and not lost:
        raise InvalidInputError(f"job {job_id} is {record.status}; only dead or failed jobs replay")
    request = AddRequest.model_validate(record.request)
    state = JobState(
        job_id=job_id,
        request=request,
        received_at=record.created_at,
        batch_id=record.batch_id,
        attempts=record.attempts + 1,
    )
    runtime.states.claim(job_id)
    runtime.store.save_job(
        job_record(state.with_(backfill=record.backfill), JobStatus.QUEUED, runtime.clock())
    )
    return enqueue(app, state, record.backfill)


class CeleryIntake:
    """``pipeline.intake.Intake`` over one Celery app: jobs go to its broker and queues, their
    state to its Redis, their records to its store."""

    def __init__(self, app: MemqCelery) -> None:
        self.app = app

    def submit(
        self,
        request: AddRequest,
        idempotency_key: str | None = None,
        batch_id: str | None = None,
        backfill: bool = False,
    ) -> Accepted:
        return submit(self.app, request, idempotency_key, batch_id, backfill)

    def replay(self, job_id: str) -> JobRecord:
        return replay(self.app, job_id)

    def accept_chat(self, event: ChatEvent) -> bool:
        from workers.chat import accept_event  # the chat module registers tasks: loaded on use

        return accept_event(self.app, event)

    def erase_user(self, tenant: str, user_id: str) -> dict[str, Any]:
        chat_tenant = self.app.runtime.settings.chat.tenant
        return erase_user_everywhere(self.app, tenant, user_id, chat_tenant)


def celery_intake(settings: Settings) -> CeleryIntake:
    """The intake of a serving process: a Celery app of its own for ``settings``, every task
    registered (chat flushes are sent by name). When tracing is configured, the tasks it sends
    carry the current trace, which the workers continue."""
    from workers.app import create_celery

    if settings.otel_endpoint is not None:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]
    return CeleryIntake(create_celery(settings))
