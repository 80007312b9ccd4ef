"""Accepting jobs: the same path for the API, the CLI and backfills.

``submit`` answers in milliseconds: it writes the ``queued`` record unless the job has one (one
Elasticsearch request, atomic, so a conversation posted twice is one job), saves the state and
joins the session's line and, when its session was idle, makes the job ready for the next batch
(behind others, the job ahead starts it). Nothing runs here. A Redis ledger of intakes under
way lets the reaper finish one whose process died between the record and the start. The
serving processes reach these functions through ``workers.serving.CeleryIntake``.
"""

from __future__ import annotations

import logging
import uuid

from kombu.exceptions import OperationalError

from pipeline.errors import InvalidInputError, TransientError
from pipeline.intake import Accepted
from pipeline.jobs import JobRecord, JobStatus, job_record
from pipeline.models import NAMESPACE, AddRequest
from pipeline.state import JobState
from workers.batches import make_ready
from workers.runtime import MemqCelery

__all__ = ["Accepted", "finish_intakes", "replay", "submit"]

log = logging.getLogger("memq.worker")


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
    *,
    request_id: str | None = None,
) -> Accepted:
    """Accept ``request`` as a job, or return the job it already is. One Elasticsearch request
    either way (``ElasticStore.create_job``). A new job's record names ``request_id``."""
    runtime = app.runtime
    job_id = job_id_for(request, idempotency_key)
    now = runtime.clock()
    state = JobState(
        job_id=job_id,
        request=request,
        received_at=now,
        batch_id=batch_id,
        backfill=backfill,
        request_id=request_id,
    )
    record = job_record(state, JobStatus.QUEUED, now)
    begun = runtime.states.intake_begun(job_id, now)
    existing = runtime.store.create_job(record)
    if existing is None:
        enqueue(app, state)
        return Accepted(record, created=True)
    if existing.status == JobStatus.QUEUED and not runtime.states.exists(job_id):
        enqueue(app, state_of(existing))  # accepted, but its intake never started it
    elif begun:
        runtime.states.intake_done(job_id)
    return Accepted(existing, created=False)


def state_of(record: JobRecord) -> JobState:
    """The state a job starts from, rebuilt from its record (its request as it was accepted)."""
    return JobState(
        job_id=record.job_id,
        request=AddRequest.model_validate(record.request),
        received_at=record.created_at,
        batch_id=record.batch_id,
        attempts=record.attempts,
        backfill=record.backfill,
        request_id=record.request_id,
    )


def enqueue(app: MemqCelery, state: JobState) -> None:
    """Start a job whose ``queued`` record is written: its state and its place in the session
    line (one step), then, first in an idle session, the start; then its intake is done.

    An intake noted as begun (``intake_begun``) and not done is finished by the reaper
    (``finish_intakes``) or by the next submit of the same job, whatever point it died at:
    before the record (nothing to start), after it (started from the record), after the line
    (the head is started). A broker that refuses the start undoes the line and the state, and
    raises ``TransientError``: the record stays ``queued`` and the job is started once the
    broker is back, so an answer of 503 never loses a job that was recorded."""
    runtime = app.runtime
    idle = runtime.states.enter(state, runtime.clock())
    try:
        start(app, state.job_id, state.backfill, idle)
    except (OperationalError, TransientError) as exc:
        runtime.states.leave(state)
        raise TransientError(f"could not enqueue job {state.job_id}: {exc}") from exc
    runtime.states.intake_done(state.job_id)


def start(app: MemqCelery, job_id: str, backfill: bool, idle: bool) -> None:
    """First in an idle session's line: nobody else will start this job, so it is ready now.
    Behind others: nothing to send. The job ahead of it makes it ready when it ends (the
    hand-on, ``workers.turns``), and the reaper's walk of the lines catches a lost hand-on."""
    if idle:
        make_ready(app, job_id, backfill)


def finish_intakes(app: MemqCelery, begun_before: float, limit: int = 100) -> None:
    """Finish the intakes begun before ``begun_before`` that never ended (the process died, or
    the broker refused the start): a job with a state is in its line (the walk of the lines
    starts it); a job whose record says ``queued`` is started from the record; any other
    (no record: the intake died before writing it; or the job ran since) is left alone."""
    runtime = app.runtime
    job_ids = runtime.states.intakes_begun_before(begun_before, limit)
    if not job_ids:
        return
    records = runtime.store.get_jobs(job_ids)
    for job_id in job_ids:
        record = records.get(job_id)
        if (
            record is not None
            and record.status == JobStatus.QUEUED
            and not runtime.states.exists(job_id)
        ):
            log.warning("job %s was accepted but never started: started now", job_id)
            enqueue(app, state_of(record))
        else:
            runtime.states.intake_done(job_id)


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
    state = state_of(record).with_(attempts=record.attempts + 1)
    now = runtime.clock()
    runtime.states.intake_begun(job_id, now)
    queued = job_record(state, JobStatus.QUEUED, now)
    runtime.store.save_job(queued)
    enqueue(app, state)
    return queued
