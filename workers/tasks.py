"""The task registry: every memq task, with its explicit name, registered on one app.

Each phase task is a thin adapter: load the job state from Redis, run the phase function from
``pipeline.phases``, save the state, hand on (the chain calls the next task). Retry policy is
data (``retry_policy``), applied here and only here for Elasticsearch/Redis failures; the LLM
adapter retries its own calls and raises ``RetriesExhaustedError``, which is not retried again.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import TYPE_CHECKING, Any, cast

from celery import Task
from celery.exceptions import Ignore

from pipeline.config import WorkerConfig
from pipeline.errors import MemqError, PermanentError, RetriesExhaustedError, TransientError
from pipeline.health import elasticsearch_health
from pipeline.jobs import job_record
from pipeline.phases import PHASES, PhaseSpec, run_phase
from pipeline.state import JobState, JobStatus, Phase
from pipeline.store.protocol import JobRecord
from workers.names import HEALTH_TASK, WAIT_TASK, phase_task_name
from workers.turns import check_delay, hand_on

if TYPE_CHECKING:
    from workers.app import MemqCelery
    from workers.runtime import Runtime

log = logging.getLogger("memq.worker")


class JobTask(Task):  # type: ignore[type-arg]
    """Base of every job task: when a task finally fails, the job's record says why.

    A ``PermanentError`` (or a bug) ends the job ``failed``; a transient failure that outlived its
    retries ends it ``dead``, listed for replay. Either way the session line moves on."""

    runtime: Runtime
    ignore_result = True  # a job's outcome is its record; nothing reads task results

    def on_failure(self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        job_id = args[0] if args else kwargs.get("job_id")
        if job_id is not None:
            record_failure(cast("MemqCelery", self.app), job_id, exc)


RECORD_ATTEMPTS = 3


def record_failure(app: MemqCelery, job_id: str, exc: Exception) -> None:
    """Write the job's final record, then free its state and hand the session line on —
    unless the record cannot be written (the state stays for an operator, the line head goes
    stale) or the job was replayed meanwhile (the new run owns the state)."""
    runtime = app.runtime
    state = runtime.states.load(job_id)
    if state is None:
        log.error("job %s failed after its state was gone: %s", job_id, exc)
        return
    dead = isinstance(exc, TransientError | RetriesExhaustedError)
    status = JobStatus.DEAD if dead else JobStatus.FAILED
    reason = getattr(exc, "reason", None) or f"internal error: {exc.__class__.__name__}: {exc}"
    phase = next((s.phase.value for s in PHASES if not state.is_done(s.phase)), None)
    if not save_record(
        runtime, job_record(state, status, runtime.clock(), phase=phase, reason=reason)
    ):
        return
    log.warning("job %s %s in phase %s: %s", job_id, status.value, phase, reason)
    current = runtime.states.load(job_id)
    if current is not None and current.attempts == state.attempts:
        runtime.states.forget(job_id, state.attempts)
        hand_on(app, state.request.scope.key, job_id)


def save_record(runtime: Runtime, record: JobRecord) -> bool:
    """The failure record is written outside any Celery retry, so it gets its own few tries."""
    for attempt in range(1, RECORD_ATTEMPTS + 1):
        try:
            runtime.store.save_job(record)
            return True
        except MemqError as error:
            log.error(
                "job %s: cannot record %s (try %d): %s",
                record.job_id,
                record.status,
                attempt,
                error,
            )
            time.sleep(attempt)
    return False


def retry_policy(policy: WorkerConfig) -> dict[str, Any]:
    """Celery's retry options for job tasks: transient failures only, exponential backoff with
    full jitter, capped, at most ``max_retries`` times."""
    return {
        "autoretry_for": (TransientError,),
        "dont_autoretry_for": (PermanentError, RetriesExhaustedError),
        "retry_backoff": policy.retry_backoff_s,
        "retry_backoff_max": policy.retry_backoff_max_s,
        "retry_jitter": True,
        "max_retries": policy.max_retries,
    }


def register_tasks(app: MemqCelery) -> None:
    """Register memq's tasks on ``app``; each is a thin adapter over a pipeline function."""
    runtime = app.runtime
    retry = retry_policy(runtime.settings.worker)

    @app.task(name=HEALTH_TASK, acks_late=False, shared=False)
    def health() -> dict[str, Any]:
        """Prove a worker is consuming: report its host and what it sees of Elasticsearch."""
        return {"worker": socket.gethostname(), "elasticsearch": elasticsearch_health(runtime.es)}

    @app.task(
        name=WAIT_TASK, bind=True, base=JobTask, max_retries=None, runtime=runtime, shared=False
    )
    def wait_turn(self: JobTask, job_id: str) -> str:
        """Hold the chain until every earlier job of the same session has ended, then take this
        attempt's turn; a chain that finds the turn taken by another (or the job over) ends."""
        state = runtime.states.load(job_id)
        if state is None:
            raise Ignore()
        if not runtime.states.my_turn(state.request.scope.key, job_id, runtime.clock()):
            raise self.retry(countdown=check_delay(self.request.retries), max_retries=None)
        if not runtime.states.take_turn(job_id, state.attempts, owner=str(self.request.id)):
            raise Ignore()
        return job_id

    for spec in PHASES:
        register_phase(app, spec, retry)


def register_phase(app: MemqCelery, spec: PhaseSpec, retry: dict[str, Any]) -> None:
    runtime = app.runtime

    @app.task(
        name=phase_task_name(spec.phase),
        bind=True,
        base=JobTask,
        runtime=runtime,
        shared=False,  # this app's alone: a second app in the process must not inherit them
        **retry,
    )
    def phase_task(self: JobTask, job_id: str) -> str:
        state = runtime.states.load(job_id)
        if state is None:  # the job already ended (a redelivered message after success)
            log.info("job %s: no state left, phase %s skipped", job_id, spec.phase.value)
            return job_id
        if spec.phase is Phase.CONTEXT:
            runtime.store.save_job(
                job_record(state, JobStatus.RUNNING, runtime.clock(), phase=spec.phase.value)
            )
        state = run_phase(spec, state, runtime.deps)
        finish(app, spec.phase, state)
        return job_id


def finish(app: MemqCelery, phase: Phase, state: JobState) -> None:
    """Save the state for the next task; after the last phase, free it and hand the session
    line on to the next job."""
    if phase is not Phase.FINALIZE:
        app.runtime.states.save(state)
        return
    app.runtime.states.forget(state.job_id, state.attempts)
    hand_on(app, state.request.scope.key, state.job_id)
