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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from kombu.exceptions import OperationalError

from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord, JobStatus, job_record
from pipeline.domain.models import NAMESPACE, AddRequest
from pipeline.domain.state import JobState
from pipeline.errors import InvalidInputError, TransientError
from pipeline.features.usage import UsageLedger, check_spendable
from pipeline.ingestion.capability import check_runnable
from pipeline.ingestion.intake import Accepted
from workers.runtime import MemqCelery, Parking
from workers.scheduler.batches import make_ready
from workers.scheduler.core import Scheduler
from workers.scheduler.turns import hand_on

__all__ = [
    "Accepted",
    "IntakeParts",
    "drain_parked",
    "finish_intakes",
    "held_job",
    "intake_of",
    "record_held",
    "replay",
    "submit",
]

log = logging.getLogger("memq.worker")


class IntakeStates(Protocol):
    """The Redis side of an intake (``RedisStateStore``; ``MemoryStateStore`` in tests): job
    states and session lines, the ledger of intakes under way, the jobs held without a
    record, and the lock of the one process that drains parked jobs."""

    def save(self, state: JobState) -> None: ...
    def load(self, job_id: str) -> JobState | None: ...
    def load_many(self, job_ids: list[str]) -> list[JobState | None]: ...
    def exists(self, job_id: str) -> bool: ...
    def forget(self, job_id: str, attempt: int) -> None: ...
    def enter(self, state: JobState, now: datetime) -> bool: ...
    def leave(self, state: JobState) -> None: ...
    def heads_line(self, session_key: str, job_id: str) -> bool: ...
    def intake_begun(self, job_id: str, now: datetime) -> bool: ...
    def intake_done(self, job_id: str) -> None: ...
    def intakes_begun_before(self, before: float, limit: int) -> list[str]: ...
    def note_unrecorded(self, job_id: str, now: datetime) -> None: ...
    def unrecorded(self, limit: int) -> list[str]: ...
    def recorded(self, *job_ids: str) -> None: ...
    def take_drain(self, owner: str, ttl_s: float) -> bool: ...
    def end_drain(self, owner: str) -> None: ...


class JobRecords(Protocol):
    """The Elasticsearch side of an intake: the jobs' records (``ElasticStore``;
    ``InMemoryStore`` in tests)."""

    def create_job(self, record: JobRecord) -> JobRecord | None: ...
    def save_job(self, record: JobRecord) -> None: ...
    def get_job(self, job_id: str) -> JobRecord | None: ...
    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord | None]: ...
    def parked_jobs(self, limit: int, fresh: bool = False) -> list[JobRecord]: ...
    def unpark_jobs(self, job_ids: Sequence[str]) -> None: ...


@dataclass(frozen=True)
class IntakeParts:
    """What accepting, holding, parking and replaying jobs needs, and nothing of Celery: the
    states and lines (Redis), the records (Elasticsearch), what this process knows of parked
    jobs, the settings, the usage ledger, the scheduler (a job made ready, a line handed on)
    and the clock. ``intake_of`` takes them from a process's app."""

    states: IntakeStates
    records: Callable[[], JobRecords]  # built on first use: Elasticsearch may be down now
    parking: Parking
    settings: Settings
    usage: UsageLedger
    scheduler: Scheduler
    clock: Callable[[], datetime]


def intake_of(app: MemqCelery) -> IntakeParts:
    """The intake of this process's app (its runtime's clients, built on first use)."""
    runtime = app.runtime
    return IntakeParts(
        states=runtime.states,
        records=lambda: runtime.store,
        parking=runtime.parking,
        settings=runtime.settings,
        usage=runtime.usage,
        scheduler=app.scheduler,
        clock=runtime.clock,
    )


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
    """``accept`` on this process's intake: what the API, the CLI and backfills call."""
    return accept(
        intake_of(app), request, idempotency_key, batch_id, backfill, request_id=request_id
    )


def accept(
    intake: IntakeParts,
    request: AddRequest,
    idempotency_key: str | None = None,
    batch_id: str | None = None,
    backfill: bool = False,
    *,
    request_id: str | None = None,
) -> Accepted:
    """Accept ``request`` as a job, or return the job it already is. One Elasticsearch request
    either way (``ElasticStore.create_job``).

    Either store may be down (the failure model in docs/ARCHITECTURE.md): with Redis down the
    job is recorded in Elasticsearch as ``parked`` (``park``), with Elasticsearch down it joins
    its line in Redis unrecorded (``hold_unrecorded``); both down raises ``TransientError``.
    While this process knows of parked jobs not yet in their lines, it parks new ones too, so
    a session's jobs join their line in the order they were accepted. A new job's record names
    ``request_id``."""
    job_id = job_id_for(request, idempotency_key)
    now = intake.clock()
    state = JobState(
        job_id=job_id,
        request=request,
        received_at=now,
        batch_id=batch_id,
        backfill=backfill,
        request_id=request_id,
    )
    record = job_record(state, JobStatus.QUEUED, now)
    if intake.parking.pending and not drain_parked(intake, fresh=True):
        try:
            return park(intake, record)
        except TransientError:
            pass  # Elasticsearch is down now: the job is held in Redis below
    try:
        begun = intake.states.intake_begun(job_id, now)
    except TransientError as exc:
        log.warning("Redis is unreachable (%s): job %s parked in Elasticsearch", exc, job_id)
        return park(intake, record)
    try:
        existing = intake.records().create_job(record)
    except TransientError as exc:
        log.warning("Elasticsearch is unreachable (%s): job %s held in Redis", exc, job_id)
        return hold_unrecorded(intake, state, record)
    if existing is None:
        enqueue_or_park(intake, state)
        return Accepted(record, created=True)
    if existing.status == JobStatus.QUEUED and not intake.states.exists(job_id):
        enqueue_or_park(intake, state_of(existing))  # accepted, but its intake never started it
    elif begun:
        intake.states.intake_done(job_id)
    return Accepted(existing, created=False)


def enqueue_or_park(intake: IntakeParts, state: JobState) -> None:
    """``enqueue`` a recorded job; when Redis or the broker refuses it, mark its record parked
    instead (its line joined once Redis is back). ``TransientError`` only when Elasticsearch
    refuses that too: the record stays ``queued`` in the ledger of intakes, which the reaper
    finishes."""
    try:
        enqueue(intake, state)
    except TransientError as exc:
        log.warning("could not start job %s (%s): parked", state.job_id, exc)
        record = job_record(state, JobStatus.QUEUED, intake.clock())
        intake.records().save_job(record.model_copy(update={"parked": True}))
        intake.parking.pending = True


def park(intake: IntakeParts, record: JobRecord) -> Accepted:
    """Accept a job with Elasticsearch alone (Redis is down, or parked jobs wait to join their
    lines): its record, marked ``parked``, holds the whole request; ``drain_parked`` moves it
    into its session's line once Redis answers. Raises ``TransientError`` when Elasticsearch
    is down too (the caller gets 503: nothing was accepted)."""
    parked = record.model_copy(update={"parked": True})
    existing = intake.records().create_job(parked)
    if existing is not None:
        return Accepted(existing, created=False)
    intake.parking.pending = True
    return Accepted(parked, created=True)


def hold_unrecorded(intake: IntakeParts, state: JobState, record: JobRecord) -> Accepted:
    """Accept a job with Redis alone (Elasticsearch is down): its state joins its session's
    line marked ``unrecorded``, and nothing starts it until ``record_held`` has written its
    record (or found the job known and ended). Raises ``TransientError`` when Redis fails too.
    A job whose state exists is known and under way: returned as it is, not accepted twice."""
    states = intake.states
    if states.exists(state.job_id):
        return Accepted(record, created=False)
    states.note_unrecorded(state.job_id, state.received_at)
    states.enter(state.with_(unrecorded=True), state.received_at)
    states.intake_done(state.job_id)
    return Accepted(record, created=True)


DRAIN_BATCH = 200
DRAIN_LEASE_S = 30.0


def drain_parked(intake: IntakeParts, fresh: bool = False) -> bool:
    """Move parked jobs into their session lines, oldest first, and start those that head
    them; True when none is left. One process drains at a time (a Redis lock), so a session's
    parked jobs join its line in acceptance order. A job already in its line (a drain that died
    before unparking it) is only unparked. Never raises: a store still down leaves the rest
    for the next drain (the reaper's, every few seconds, or the next submit of this process).
    ``fresh``: read the records just written too (a refresh of the jobs index)."""
    owner = uuid.uuid4().hex
    try:
        if not intake.states.take_drain(owner, DRAIN_LEASE_S):
            return False
        try:
            left = _drain_once(intake, fresh)
        finally:
            intake.states.end_drain(owner)
    except (TransientError, OperationalError) as exc:
        log.warning("parked jobs not moved yet: %s", exc)
        return False
    if not left:
        intake.parking.pending = False
    return not left


def _drain_once(intake: IntakeParts, fresh: bool) -> bool:
    """One page of parked jobs into their lines; True when more may be left."""
    records = intake.records().parked_jobs(DRAIN_BATCH, fresh=fresh)
    moved: list[str] = []
    try:
        for record in records:
            if not intake.states.exists(record.job_id):
                enqueue(intake, state_of(record))
            moved.append(record.job_id)
    finally:
        intake.records().unpark_jobs(moved)
    if records:
        log.warning("%d parked job(s) joined their session lines", len(moved))
    return len(records) == DRAIN_BATCH


def record_held(intake: IntakeParts, limit: int = DRAIN_BATCH) -> None:
    """Write the records of jobs accepted while Elasticsearch was down (oldest first), then let
    them start: a job heading its line is made ready; one behind others waits for its turn.
    A job whose record shows it known and no longer queued (the same conversation sent again
    during the outage, after it had run) leaves its line instead: it is not run twice. A held
    job whose state is gone (erased) is forgotten."""
    job_ids = intake.states.unrecorded(limit)
    if not job_ids:
        return
    for job_id, state in zip(job_ids, intake.states.load_many(job_ids), strict=True):
        if state is not None:
            _record_one(intake, state)
        intake.states.recorded(job_id)


def _record_one(intake: IntakeParts, state: JobState) -> None:
    existing = intake.records().create_job(job_record(state, JobStatus.QUEUED, state.received_at))
    if existing is not None and existing.status != JobStatus.QUEUED:
        log.warning(
            "job %s was accepted again while it had %s: not run again",
            state.job_id,
            existing.status,
        )
        withdraw(intake, state)
        return
    intake.states.save(state.with_(unrecorded=False))
    if intake.states.heads_line(state.request.scope.key, state.job_id):
        make_ready(intake.scheduler, state.job_id, state.backfill)


def withdraw(intake: IntakeParts, state: JobState) -> None:
    """Forget a held job and take it out of its line; the job behind it gets its turn, as
    when a job ends (``workers.scheduler.turns.hand_on``)."""
    intake.states.forget(state.job_id, state.attempts)
    hand_on(intake.scheduler, [(state.request.scope.key, state.job_id)])


def held_job(app: MemqCelery, job_id: str) -> JobRecord | None:
    """``held`` on this process's intake (the API's job route)."""
    return held(intake_of(app), job_id)


def held(intake: IntakeParts, job_id: str) -> JobRecord | None:
    """The ``queued`` record of a job held in Redis unrecorded (``hold_unrecorded``), rebuilt
    from its state, so its caller can follow it before the record is written; else None."""
    state = intake.states.load(job_id)
    if state is None or not state.unrecorded:
        return None
    return job_record(state, JobStatus.QUEUED, state.received_at)


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


def enqueue(intake: IntakeParts, state: JobState) -> None:
    """Start a job whose ``queued`` record is written: its state and its place in the session
    line (one step), then, first in an idle session, the start; then its intake is done.

    An intake noted as begun (``intake_begun``) and not done is finished by the reaper
    (``finish_intakes``) or by the next submit of the same job, whatever point it died at:
    before the record (nothing to start), after it (started from the record), after the line
    (the head is started). A broker that refuses the start undoes the line and the state, and
    raises ``TransientError``: the record stays ``queued`` and the job is started once the
    broker is back, so an answer of 503 never loses a job that was recorded."""
    idle = intake.states.enter(state, intake.clock())
    try:
        start(intake, state.job_id, state.backfill, idle)
    except (OperationalError, TransientError) as exc:
        intake.states.leave(state)
        raise TransientError(f"could not enqueue job {state.job_id}: {exc}") from exc
    intake.states.intake_done(state.job_id)


def start(intake: IntakeParts, job_id: str, backfill: bool, idle: bool) -> None:
    """First in an idle session's line: nobody else will start this job, so it is ready now.
    Behind others: nothing to send. The job ahead of it makes it ready when it ends (the
    hand-on, ``workers.scheduler.turns``), and the reaper's walk of the lines catches a lost
    hand-on."""
    if idle:
        make_ready(intake.scheduler, job_id, backfill)


def finish_intakes(intake: IntakeParts, begun_before: float, limit: int = 100) -> None:
    """Finish the intakes begun before ``begun_before`` that never ended (the process died, or
    the broker refused the start): a job with a state is in its line (the walk of the lines
    starts it); a job whose record says ``queued`` is started from the record; any other
    (no record: the intake died before writing it; or the job ran since) is left alone."""
    job_ids = intake.states.intakes_begun_before(begun_before, limit)
    if not job_ids:
        return
    records = intake.records().get_jobs(job_ids)
    for job_id in job_ids:
        record = records.get(job_id)
        if (
            record is not None
            and record.status == JobStatus.QUEUED
            and not intake.states.exists(job_id)
        ):
            log.warning("job %s was accepted but never started: started now", job_id)
            enqueue(intake, state_of(record))
        else:
            intake.states.intake_done(job_id)


def replay(app: MemqCelery, job_id: str) -> JobRecord:
    """``replay_job`` on this process's intake (the API, the CLI)."""
    return replay_job(intake_of(app), job_id)


def replay_job(intake: IntakeParts, job_id: str) -> JobRecord:
    """Run a ``dead`` or ``failed`` job again from its recorded request, on the queue it ran on
    (a backfill job stays on the backfill queue). A job left ``queued`` with no state behind it
    (its intake died before enqueueing) replays too."""
    record = intake.records().get_job(job_id)
    if record is None:
        raise InvalidInputError(f"no job {job_id}", field="job_id")
    lost = record.status == JobStatus.QUEUED and not intake.states.exists(job_id)
    if record.status not in (JobStatus.DEAD, JobStatus.FAILED) and not lost:
        raise InvalidInputError(f"job {job_id} is {record.status}; only dead or failed jobs replay")
    state = state_of(record).with_(attempts=record.attempts + 1)
    check_runnable(state.request, intake.settings)  # a replay that would fail again is refused
    now = intake.clock()
    check_spendable(state.request, intake.settings.llm.vision, intake.usage, now, at_intake=True)
    intake.states.intake_begun(job_id, now)
    queued = job_record(state, JobStatus.QUEUED, now)
    intake.records().save_job(queued)
    enqueue(intake, state)
    return queued
