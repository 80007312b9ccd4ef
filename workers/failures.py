"""How a job ends when it cannot succeed: its final record written (or left to
``memq.job.record_end`` while Elasticsearch is down), its usage charged, its state freed and its
session's line handed on, and the failure reported where Celery's tasks are watched (Flower).
A task that failed for good lets its run go (``release_run``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from celery import Celery
from kombu.exceptions import OperationalError

from pipeline.config import QueueConfig
from pipeline.domain.jobs import JobStatus, job_record
from pipeline.domain.state import JobState
from pipeline.errors import RetriesExhaustedError, TransientError
from pipeline.features.usage import UsageLedger, charge_of
from pipeline.ingestion.phases import PHASES, Workload
from workers.names import FAILED_TASK, RECORD_TASK
from workers.queues import queue_for
from workers.scheduler.core import Scheduler
from workers.scheduler.keeper import Held
from workers.scheduler.turns import hand_on

log = logging.getLogger("memq.worker")

RECORD_AGAIN_S = 60.0


class Reports(Protocol):
    """The messages an ending sends besides the scheduler's (``CeleryReports`` sends them as
    tasks): a record to write later, and a failure to show in Flower. Each raises kombu's
    ``OperationalError`` when the broker cannot take it."""

    def record_later(self, fields: dict[str, Any], queue: str) -> None: ...
    def show_failed(self, fields: dict[str, Any], queue: str, task_id: str) -> None: ...


class CeleryReports:
    """``Reports`` as Celery tasks: ``memq.job.record_end`` and ``memq.job.failed``."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def record_later(self, fields: dict[str, Any], queue: str) -> None:
        self.app.send_task(RECORD_TASK, kwargs=fields, queue=queue)

    def show_failed(self, fields: dict[str, Any], queue: str, task_id: str) -> None:
        self.app.send_task(FAILED_TASK, kwargs=fields, queue=queue, task_id=task_id)


class Charges(Protocol):
    """What an ending counts (``WorkerMetrics``)."""

    def jobs_ended(self, status: str) -> None: ...


@dataclass(frozen=True)
class Endings:
    """What ending a job needs: the scheduler (states, leases, records, the hand-on), the
    usage ledger its tokens are charged to, the metrics, the queues and the reports."""

    scheduler: Scheduler
    usage: UsageLedger
    metrics: Charges
    queues: QueueConfig
    reports: Reports


def release_run(sched: Scheduler, held: Held | None, *, unfinished: bool) -> None:
    """A task failed for good: its run ends, unless a job's failure could not be recorded (the
    store is down). That run stays leased, ownerless, for RECORD_AGAIN_S: the reaper then runs
    the phase again, so the job is swept later instead of stranded."""
    if held is None:
        return
    if unfinished:
        expires = sched.expiry() + RECORD_AGAIN_S
        sched.leases.hand_on(held.run_id, held.token, held.phase, expires=expires)
    else:
        sched.leases.close(held.run_id, held.token)


def record_failure(endings: Endings, job_id: str, exc: BaseException) -> bool:
    """Write the job's final record, then free its state and hand the session line on. A
    record that cannot be written now (Elasticsearch down) is left to ``record_end``, retried
    against the deadline; until it is written the state stays, so nothing is lost. False when
    even that cannot be sent (the broker is gone too): the state stays, and the run's lease
    brings the job back later. A job replayed meanwhile is left alone (the new run owns it)."""
    state = endings.scheduler.states.load(job_id)
    if state is None:
        log.error("job %s failed after its state was gone: %s", job_id, exc)
        return True
    dead = isinstance(exc, TransientError | RetriesExhaustedError)
    status = JobStatus.DEAD if dead else JobStatus.FAILED
    reason = getattr(exc, "reason", None) or f"internal error: {exc.__class__.__name__}: {exc}"
    phase = next((s.phase.value for s in PHASES if not state.is_done(s.phase)), None)
    try:
        end_job(endings, state, status, phase, reason)
    except TransientError as error:
        log.error("job %s: cannot record %s yet, retrying: %s", job_id, status.value, error)
        queue = queue_for(Workload.IO, endings.queues, state.backfill)
        end = {"job_id": job_id, "attempts": state.attempts, "status": status.value}
        try:
            endings.reports.record_later({**end, "phase": phase, "reason": reason}, queue)
        except OperationalError as lost:  # the broker is gone too: the state stays
            log.error("job %s: cannot schedule its record either: %s", job_id, lost)
            return False
    return True


def end_job(
    endings: Endings, state: JobState, status: JobStatus, phase: str | None, reason: str
) -> None:
    """Record the job ``status`` with ``reason`` and charge its usage to its tenant, then
    free its state and hand the line on (unless it was replayed meanwhile). Raises
    ``TransientError`` when the record cannot be written or the charge applied; nothing else
    has happened then (the charge is applied once however often this runs)."""
    sched = endings.scheduler
    record = job_record(state, status, sched.clock(), phase=phase, reason=reason)
    sched.records().save_job(record)
    endings.usage.charge([charge_of(record)])
    endings.metrics.jobs_ended(status.value)
    log.warning(
        "job %s %s in phase %s: %s",
        state.job_id,
        status.value,
        phase,
        reason,
        extra={**state.log_fields(), "phase": phase},
    )
    report_failure(endings, state, status, phase, reason)
    current = sched.states.load(state.job_id)
    if current is not None and current.attempts == state.attempts:
        sched.states.forget(state.job_id, state.attempts)
        hand_on(sched, [(state.request.scope.key, state.job_id)])


class JobFailedError(Exception):
    """What ``memq.job.failed`` raises: a failed or dead job, with its reason."""


def failure_report_id(job_id: str, attempts: int) -> str:
    """The task id of the report of a job's failure (one per attempt: a replay that fails
    again is reported again)."""
    return f"memq-job-failed-{job_id}-{attempts}"


def report_failure(
    endings: Endings, state: JobState, status: JobStatus, phase: str | None, reason: str
) -> None:
    """Make a failed or dead job visible where Celery's tasks are watched (Flower). A job's
    phases run as tasks over micro-batches, and one job failing leaves its batch's task a
    success (its batch-mates went on), so Flower would show every task of a failed job green.
    One more task, ``memq.job.failed``, fails on purpose with the job's reason: Flower lists it
    as FAILURE, and its result (in the result backend) names the job and why. It touches no
    job state; a broker that cannot take it costs only this report (logged)."""
    queue = queue_for(Workload.IO, endings.queues, state.backfill)
    fields = {"job_id": state.job_id, "status": status.value, "phase": phase, "reason": reason}
    try:
        endings.reports.show_failed(fields, queue, failure_report_id(state.job_id, state.attempts))
    except OperationalError as exc:
        log.warning("job %s: cannot report its failure to Flower: %s", state.job_id, exc)
