"""The task registry: every memq task, with its explicit name, registered on one app.

Each phase task is a thin adapter over a batch: load the states of its jobs from Redis (one
round trip), run the phase function from ``pipeline.phases`` over them, save them (one round
trip), and let the chain call the next task. A job the phase could not finish leaves the
batch: a permanent failure ends it ``failed``; a transient one sends it on alone, to retry that
phase with backoff, while its batch-mates go on; a failure of every job at once (Elasticsearch
down) retries the batch task itself. Transient faults are retried against a deadline, not a
count (``workers.retry``); the LLM adapter retries its own calls to a server that answers, and
raises ``RetriesExhaustedError``, which is not retried again. A job's final record that cannot
be written is written by a task of its own, retried against the same deadline.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any, cast

from celery import Task
from celery.exceptions import Ignore, SoftTimeLimitExceeded
from kombu.exceptions import OperationalError

from pipeline.batch import BatchResult
from pipeline.errors import MemqError, PermanentError, RetriesExhaustedError, TransientError
from pipeline.health import elasticsearch_health
from pipeline.jobs import JobStatus, job_record
from pipeline.logs import log_context
from pipeline.phases import PHASES, PhaseSpec, Workload, run_batch
from pipeline.state import JobState, Phase
from workers.batches import batch_ended, gather, make_ready, send_alone
from workers.names import GATHER_TASK, HEALTH_TASK, RECORD_TASK, WAIT_TASK, phase_task_name
from workers.retry import RetryPolicy, retried
from workers.runtime import MemqCelery, Runtime, queue_for
from workers.turns import check_delay, hand_on

log = logging.getLogger("memq.worker")


class JobTask(Task):  # type: ignore[type-arg]
    """Base of every job task: when a task finally fails, the record of each of its jobs says
    why. A ``PermanentError`` (or a bug) ends a job ``failed``; a transient failure that
    outlived its retries ends it ``dead``, listed for replay. Either way the session line
    moves on."""

    runtime: Runtime
    ignore_result = True  # a job's outcome is its record; nothing reads task results

    def on_failure(self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        app = cast("MemqCelery", self.app)
        if self.name == GATHER_TASK:  # its jobs go back to the ready list for another gather
            app.runtime.states.release_batch(task_id, args[0] if args else kwargs["lane"])
            batch_ended(app, task_id)
            return
        if self.name == WAIT_TASK:
            job_id = args[0] if args else kwargs.get("job_id")
            if job_id is not None:
                record_failure(app, job_id, exc)
            return
        batch_id, job_ids = (args[0], args[1]) if len(args) >= 2 else (None, [])
        for state in app.runtime.states.load_many(list(job_ids)):
            if state is not None and state.run == batch_id:
                record_failure(app, state.job_id, exc)
        if batch_id is not None:
            batch_ended(app, batch_id)


def record_failure(app: MemqCelery, job_id: str, exc: BaseException) -> None:
    """Write the job's final record, then free its state and hand the session line on. A
    record that cannot be written now (Elasticsearch down) is left to ``record_end``, retried
    against the deadline; until it is written the state stays, so nothing is lost. A job
    replayed meanwhile is left alone (the new run owns the state)."""
    runtime = app.runtime
    state = runtime.states.load(job_id)
    if state is None:
        log.error("job %s failed after its state was gone: %s", job_id, exc)
        return
    dead = isinstance(exc, TransientError | RetriesExhaustedError)
    status = JobStatus.DEAD if dead else JobStatus.FAILED
    reason = getattr(exc, "reason", None) or f"internal error: {exc.__class__.__name__}: {exc}"
    phase = next((s.phase.value for s in PHASES if not state.is_done(s.phase)), None)
    try:
        end_job(app, state, status, phase, reason)
    except TransientError as error:
        log.error("job %s: cannot record %s yet, retrying: %s", job_id, status.value, error)
        queue = queue_for(Workload.IO, runtime.settings.queues, state.backfill)
        end = {"job_id": job_id, "attempts": state.attempts, "status": status.value}
        try:
            app.send_task(
                RECORD_TASK, kwargs={**end, "phase": phase, "reason": reason}, queue=queue
            )
        except OperationalError as lost:  # the broker is gone too: the state stays
            log.error("job %s: cannot schedule its record either: %s", job_id, lost)


def end_job(
    app: MemqCelery, state: JobState, status: JobStatus, phase: str | None, reason: str
) -> None:
    """Record the job ``status`` with ``reason``, then free its state and hand the line on
    (unless it was replayed meanwhile). Raises ``TransientError`` when the record cannot be
    written; nothing else has happened then."""
    runtime = app.runtime
    runtime.store.save_job(job_record(state, status, runtime.clock(), phase=phase, reason=reason))
    log.warning(
        "job %s %s in phase %s: %s",
        state.job_id,
        status.value,
        phase,
        reason,
        extra={"job_id": state.job_id, "tenant": state.request.scope.tenant, "phase": phase},
    )
    current = runtime.states.load(state.job_id)
    if current is not None and current.attempts == state.attempts:
        runtime.states.forget(state.job_id, state.attempts)
        hand_on(app, state.request.scope.key, state.job_id)


def register_tasks(app: MemqCelery) -> None:
    """Register memq's tasks on ``app``; each is a thin adapter over a pipeline function."""
    runtime = app.runtime
    policy = RetryPolicy.of(runtime.settings.worker)

    @app.task(name=HEALTH_TASK, acks_late=False, shared=False)
    def health() -> dict[str, Any]:
        """Prove a worker is consuming: report its host and what it sees of Elasticsearch."""
        return {"worker": socket.gethostname(), "elasticsearch": elasticsearch_health(runtime.es)}

    @app.task(
        name=WAIT_TASK, bind=True, base=JobTask, max_retries=None, runtime=runtime, shared=False
    )
    def wait_turn(self: JobTask, job_id: str, fault_since: float | None = None) -> str:
        """Hold the job until every earlier job of its session has ended, then make it ready
        for a batch; a job that has ended meanwhile is let go. A Redis or broker fault is
        retried against the deadline."""
        with retried(self, policy):
            state = runtime.states.load(job_id)
            if state is None:
                raise Ignore()
            turn = runtime.states.my_turn(state.request.scope.key, job_id, runtime.clock())
            if turn:
                make_ready(app, job_id, state.backfill)
        if not turn:  # not a fault: the deadline starts again at the next one
            delay = check_delay(self.request.retries)
            raise self.retry(countdown=delay, kwargs={}, max_retries=None)
        return job_id

    @app.task(
        name=GATHER_TASK, bind=True, base=JobTask, max_retries=None, runtime=runtime, shared=False
    )
    def gather_batch(self: JobTask, lane: str, fault_since: float | None = None) -> list[str]:
        """Take a batch of ready jobs and send it down the phases; returns its job ids (what
        Flower shows as the result)."""
        with retried(self, policy):
            return gather(app, str(self.request.id), lane)

    @app.task(name=RECORD_TASK, bind=True, max_retries=None, shared=False)
    def record_end(
        self: Task,  # type: ignore[type-arg]
        *,
        job_id: str,
        attempts: int,
        status: str,
        phase: str | None,
        reason: str,
        fault_since: float | None = None,
    ) -> None:
        """Write a job's final record that could not be written when it ended. Past the
        deadline the job's state stays in Redis, for a sweep to find."""
        with retried(self, policy):
            state = runtime.states.load(job_id)
            if state is not None and state.attempts == attempts:  # else replayed or erased
                end_job(app, state, JobStatus(status), phase, reason)

    for spec in PHASES:
        register_phase(app, spec, policy)


def register_phase(app: MemqCelery, spec: PhaseSpec, policy: RetryPolicy) -> None:
    @app.task(
        name=phase_task_name(spec.phase),
        bind=True,
        base=JobTask,
        max_retries=None,  # the deadline bounds retries (workers.retry), not a count
        runtime=app.runtime,
        shared=False,  # this app's alone: a second app in the process must not inherit them
    )
    def phase_task(
        self: JobTask, batch_id: str, job_ids: list[str], fault_since: float | None = None
    ) -> list[str]:
        with log_context(phase=spec.phase.value, batch=batch_id), retried(self, policy):
            return run_phase_task(app, spec, batch_id, job_ids, fault_since)


def run_phase_task(
    app: MemqCelery,
    spec: PhaseSpec,
    batch_id: str,
    job_ids: list[str],
    fault_since: float | None = None,
) -> list[str]:
    """One phase over the batch's jobs that are still in it (see the module docstring)."""
    runtime = app.runtime
    states = [s for s in runtime.states.load_many(job_ids) if s is not None and s.run == batch_id]
    if not states:  # every job ended or left the batch (a redelivered message)
        if spec.phase is Phase.FINALIZE:
            batch_ended(app, batch_id)
        return []
    todo = [s for s in states if not s.is_done(spec.phase)]
    result = run_guarded(spec, states, runtime)
    failed = [result.failures[s.job_id] for s in todo if s.job_id in result.failures]
    if todo and len(failed) == len(todo) and all(isinstance(e, TransientError) for e in failed):
        raise failed[0]  # the whole batch failed alike: retry the batch task
    finish(app, spec.phase, result.states)
    settle_failures(app, spec.phase, states, result.failures, fault_since)
    if spec.phase is Phase.FINALIZE:  # after the hand-ons: one gather takes what waits
        batch_ended(app, batch_id)
    return [s.job_id for s in result.states]


def run_guarded(spec: PhaseSpec, states: list[JobState], runtime: Runtime) -> BatchResult:
    """The phase over the batch. A bug (an exception that is not memq's) met by the batch is
    met again job by job, so it fails only the job that causes it."""
    try:
        return run_batch(spec, states, runtime.deps)
    except (SoftTimeLimitExceeded, MemqError):
        raise
    except Exception:
        if len(states) == 1:
            raise
        log.exception("phase %s failed for a batch of %d; job by job", spec.phase, len(states))
    result = BatchResult()
    for state in states:
        try:
            result.merge(run_batch(spec, [state], runtime.deps))
        except (SoftTimeLimitExceeded, TransientError):
            raise
        except Exception as exc:
            result.failures[state.job_id] = PermanentError(
                f"internal error: {exc.__class__.__name__}: {exc}"
            )
    return result


def finish(app: MemqCelery, phase: Phase, states: list[JobState]) -> None:
    """Save the states for the next task; after the last phase, free them and hand each
    session's line on to its next job."""
    runtime = app.runtime
    if phase is not Phase.FINALIZE:
        runtime.states.save_many(states)
        return
    for state in states:
        log.info(
            "job %s succeeded",
            state.job_id,
            extra={"job_id": state.job_id, "tenant": state.request.scope.tenant},
        )
        runtime.states.forget(state.job_id, state.attempts)
        hand_on(app, state.request.scope.key, state.job_id)


def settle_failures(
    app: MemqCelery,
    phase: Phase,
    states: list[JobState],
    failures: dict[str, MemqError],
    fault_since: float | None = None,
) -> None:
    """A job that failed alone: ended when retrying cannot help, otherwise sent on by itself
    to retry the phase after a backoff, carrying when its fault began (the batch's, if the
    batch was already retrying) so the deadline holds for it too."""
    policy = RetryPolicy.of(app.runtime.settings.worker)
    now = time.time()
    since = fault_since or now
    for state in states:
        exc = failures.get(state.job_id)
        if exc is None:
            continue
        if isinstance(exc, TransientError) and not policy.expired(since, now):
            log.warning("job %s left its batch in %s to retry alone: %s", state.job_id, phase, exc)
            delay = policy.delay_s(state.retries, exc.retry_after_s)
            send_alone(app, state, phase, delay, since)
        else:
            record_failure(app, state.job_id, exc)
