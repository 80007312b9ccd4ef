"""The task registry: every memq task, with its explicit name, registered on one app.

Each phase task is a thin adapter over a batch: claim the batch's run (``workers.scheduler.leases``:
one owner at a time, its lease renewed by the process's keeper while the task runs), load the states
of its jobs from Redis (one round trip), run the phase function from ``pipeline.ingestion.phases``
over them, save them (one round trip), hand the run on to the next phase, and let the chain call the
next task. A job the phase could not finish leaves the batch: a permanent failure ends it
``failed``; a transient one sends it on alone, to retry that phase with backoff, while its
batch-mates go on; a failure of every job at once (Elasticsearch down) retries the batch task
itself. Transient faults are retried against a deadline, not a count (``workers.retry``); the LLM
adapter retries its own calls to a server that answers, and raises ``RetriesExhaustedError``, which
is not retried again. A job's final record that cannot be written is written by a task of its own,
retried against the same deadline (``workers.failures``). A run whose owner died is recovered by the
reaper (``workers.scheduler.reaper``), which the keepers take turns to run.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from typing import Any, cast

from celery import Task
from celery.exceptions import Ignore, SoftTimeLimitExceeded

from pipeline.domain.jobs import JobStatus
from pipeline.domain.state import JobState, Phase, run_log_fields
from pipeline.errors import (
    MemqError,
    PermanentError,
    TransientError,
)
from pipeline.ingestion.batch import BatchResult
from pipeline.ingestion.phases import PHASES, PhaseSpec, next_phase, run_batch
from pipeline.ingestion.phases.retrieve import embed_queries_ahead
from pipeline.logs import log_context
from pipeline.store.health import elasticsearch_health
from workers.failures import (
    JobFailedError,
    end_job,
    record_failure,
    release_run,
)
from workers.intake import intake_of
from workers.names import (
    FAILED_TASK,
    GATHER_TASK,
    HEALTH_TASK,
    PREPARE_TASK,
    RECORD_TASK,
    phase_task_name,
)
from workers.retry import RetryPolicy, retried
from workers.runtime import MemqCelery, Runtime
from workers.scheduler.batches import (
    batch_ended,
    gather,
    send_alone,
)
from workers.scheduler.keeper import Held, give_up_for_retry, lapses, sent_on
from workers.scheduler.leases import GATHERING
from workers.scheduler.reaper import claim_run, reap
from workers.scheduler.state_store import Lane
from workers.scheduler.turns import hand_on
from workers.scheduler.waves import run_in_waves
from workers.webhooks import send_webhooks

log = logging.getLogger("memq.worker")


@dataclass(frozen=True)
class Failure:
    """A task that failed for good: its id, the run it owned (now released), the error, and
    the arguments of its message."""

    task_id: str
    held: Held | None
    exc: Exception
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class JobTask(Task):  # type: ignore[type-arg]
    """Base of the tasks that own a run (``GatherTask``, ``PhaseTask``): the run's lease is
    given up when the task succeeds, retries or fails, and each kind says in ``failed`` what
    becomes of its jobs when it fails for good."""

    runtime: Runtime
    ignore_result = True  # a job's outcome is its record; nothing reads task results

    def on_success(self, retval: Any, task_id: str, args: Any, kwargs: Any) -> None:
        """The next phase's message is in the broker now (Celery sent it before calling this):
        the run waiting for it needs no lease any more."""
        app = cast("MemqCelery", self.app)
        sent_on(app.keeper, app.runtime.leases, task_id, phase_after)

    def retry(self, *args: Any, **kwargs: Any) -> Any:
        """Give the run up before the retry's message is sent: a retry with no countdown can
        be taken by another thread at once, and must find the run ownerless, not owned by an
        earlier delivery of its own task id (which would read as a worker that died). With
        Redis away the task ends acknowledged instead (``Ignore``), its run left to lapse."""
        if not self.give_up_run(str(self.request.id)):
            raise Ignore()
        return super().retry(*args, **kwargs)

    def on_retry(self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        self.give_up_run(task_id)  # already done by ``retry``, unless the retry came otherwise

    def give_up_run(self, task_id: str) -> bool:
        app = cast("MemqCelery", self.app)
        held_back_s = app.runtime.settings.worker.retry_backoff_max_s
        return give_up_for_retry(app.keeper, app.runtime.leases, task_id, held_back_s)

    def on_failure(self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        """The kind's ``failed``; when Redis is away even for that, the run (if this task
        owned one) lapses and is recovered, and its jobs are recorded when they fail again."""
        app = cast("MemqCelery", self.app)
        held = app.keeper.release(task_id)
        try:
            self.failed(app, Failure(task_id, held, exc, tuple(args or ()), dict(kwargs or {})))
        except TransientError as fault:
            what = f"record its failure ({exc.__class__.__name__}: {exc})"
            if held is None:  # it owned no run: whatever runs its jobs records them
                log.warning("task %s: cannot %s: %s", task_id, what, fault.reason)
            else:
                lapses(held, what, fault)

    def failed(self, app: MemqCelery, failure: Failure) -> None:
        """What this kind of task does when it fails for good."""
        raise NotImplementedError


def phase_after(phase: str) -> str | None:
    """The phase whose message a task of ``phase`` leaves in the broker as it ends (a gather
    sends a whole chain, whose first task claims the run itself)."""
    following = None if phase == GATHERING else next_phase(Phase(phase))
    return None if following is None else following.value


class GatherTask(JobTask):
    """The gather task: on failure its jobs go back to the ready list for another gather."""

    def failed(self, app: MemqCelery, failure: Failure) -> None:
        lane = failure.args[0] if failure.args else failure.kwargs["lane"]
        app.runtime.states.release_batch(failure.task_id, lane)
        batch_ended(app.scheduler, failure.task_id)
        release_run(app.scheduler, failure.held, unfinished=False)


class PhaseTask(JobTask):
    """A phase task: when it fails for good, the record of each job still in its batch's run
    says why. A ``PermanentError`` (or a bug) ends a job ``failed``; a transient failure that
    outlived its retries ends it ``dead``, listed for replay. Either way the session line
    moves on."""

    def failed(self, app: MemqCelery, failure: Failure) -> None:
        args = failure.args
        batch_id, job_ids = (args[0], args[1]) if len(args) >= 2 else (None, [])
        unfinished = False
        for state in app.runtime.states.load_many(list(job_ids)):
            if state is not None and state.run == batch_id:
                unfinished |= not record_failure(app.endings, state.job_id, failure.exc)
        if batch_id is not None:
            batch_ended(app.scheduler, batch_id)
        release_run(app.scheduler, failure.held, unfinished=unfinished)


def register_failure_report(app: MemqCelery) -> None:
    """``memq.job.failed`` (see ``report_failure``)."""

    @app.task(name=FAILED_TASK, acks_late=False, throws=(JobFailedError,), shared=False)
    def job_failed(*, job_id: str, status: str, phase: str | None, reason: str) -> None:
        """Fails on purpose (``report_failure``): the job ``job_id`` ended ``status``. An
        expected error (``throws``): the worker logs it without a traceback."""
        raise JobFailedError(f"job {job_id} {status} in phase {phase}: {reason}")


def register_tasks(app: MemqCelery) -> None:
    """Register memq's tasks on ``app``; each is a thin adapter over a pipeline function."""
    runtime = app.runtime
    policy = RetryPolicy.of(runtime.settings.worker)

    @app.task(name=HEALTH_TASK, acks_late=False, shared=False)
    def health() -> dict[str, Any]:
        """Prove a worker is consuming: report its host and what it sees of Elasticsearch."""
        return {"worker": socket.gethostname(), "elasticsearch": elasticsearch_health(runtime.es)}

    @app.task(
        name=GATHER_TASK,
        bind=True,
        base=GatherTask,
        max_retries=None,
        runtime=runtime,
        shared=False,
    )
    def gather_batch(self: GatherTask, lane: str, fault_since: float | None = None) -> list[str]:
        """Take a batch of ready jobs and send it down the phases; returns its job ids (what
        Flower shows as the result)."""
        with retried(self, policy):
            return gather_run(app, self, Lane(lane))

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
                end_job(app.endings, state, JobStatus(status), phase, reason)

    register_failure_report(app)

    @app.task(name=PREPARE_TASK, acks_late=False, ignore_result=True, shared=False)
    def prepare(job_ids: list[str]) -> int:
        """Embed ahead the new turns of jobs waiting for their turn; returns how many."""
        return prepare_run(app, job_ids)

    for spec in PHASES:
        register_phase(app, spec, policy)
    app.keeper.reap = lambda: reap(app.scheduler, intake_of(app), app.runtime.redis)


def prepare_run(app: MemqCelery, job_ids: list[str]) -> int:
    """The new turns of jobs waiting behind a batch's (``workers.scheduler.batches.embed_ahead``
    sends them as the batch starts), embedded through the query embedder, which keeps them for their
    retrieval to find. Best effort: nothing waits for it, and a fault only leaves retrieval the
    model call it would have saved."""
    try:
        states = app.runtime.states.load_many(job_ids)
        waiting = [s for s in states if s is not None and not s.is_done(Phase.RETRIEVE)]
        return embed_queries_ahead(waiting, app.runtime.deps)
    except MemqError as exc:
        log.warning("turns of %d job(s) not embedded ahead: %s", len(job_ids), exc)
        return 0


def gather_run(app: MemqCelery, task: JobTask, lane: Lane) -> list[str]:
    """The gather task's run: claimed under the task's id, which is the batch's id."""
    batch_id = str(task.request.id)
    token = claim_run(app.scheduler, batch_id, batch_id, GATHERING, lane)
    if token is None:
        task.request.chain = None  # nothing of this execution goes on down the chain
        return []
    taken = gather(app.scheduler, batch_id, lane, token)
    if not taken:
        app.runtime.leases.close(batch_id, token)
    return taken


def register_phase(app: MemqCelery, spec: PhaseSpec, policy: RetryPolicy) -> None:
    @app.task(
        name=phase_task_name(spec.phase),
        bind=True,
        base=PhaseTask,
        max_retries=None,  # the deadline bounds retries (workers.retry), not a count
        runtime=app.runtime,
        shared=False,  # this app's alone: a second app in the process must not inherit them
    )
    def phase_task(
        self: PhaseTask, batch_id: str, job_ids: list[str], fault_since: float | None = None
    ) -> list[str]:
        with log_context(phase=spec.phase.value, batch=batch_id), retried(self, policy):
            token = claim_run(app.scheduler, str(self.request.id), batch_id, spec.phase.value)
            if token is None:
                self.request.chain = None  # nothing of this execution goes on down the chain
                return []
            done = run_phase_task(
                app, spec, batch_id, job_ids, token=token, fault_since=fault_since
            )
            if done is None:
                self.request.chain = None
                return []
            return done


def run_phase_task(
    app: MemqCelery,
    spec: PhaseSpec,
    batch_id: str,
    job_ids: list[str],
    *,
    token: str,
    fault_since: float | None = None,
) -> list[str] | None:
    """One phase over the batch's jobs that are still in it (see the module docstring), by the
    execution that owns the run (``token``). None when the chain stops here: every job left
    the run, or this execution lost it meanwhile (it overran its time limit and the reaper
    sent the jobs on), and then nothing it computed is kept."""
    runtime = app.runtime
    states = [s for s in runtime.states.load_many(job_ids) if s is not None and s.run == batch_id]
    if not states:  # every job ended or left the batch
        runtime.leases.close(batch_id, token)
        batch_ended(app.scheduler, batch_id)
        return None
    todo = [s for s in states if not s.is_done(spec.phase)]
    with runtime.metrics.phase(spec.phase.value), log_context(**run_log_fields(states)):
        if spec.each is not None and todo and runtime.settings.worker.wave_ms > 0:
            result = run_in_waves(
                app.scheduler,
                spec,
                batch_id,
                token,
                states,
                deps=runtime.deps,
                fallback=lambda left: run_guarded(spec, left, runtime),
            )
        else:
            result = run_guarded(spec, states, runtime)
    failed = [result.failures[s.job_id] for s in todo if s.job_id in result.failures]
    if todo and len(failed) == len(todo) and all(isinstance(e, TransientError) for e in failed):
        raise failed[0]  # the whole batch failed alike: retry the batch task
    if not runtime.leases.owns(batch_id, token):
        log.error("run %s: %s finished after losing its lease; dropped", batch_id, spec.phase)
        return None
    finish(app, spec.phase, result.states)
    settle_failures(app, spec.phase, states, result.failures, fault_since)
    hand_on_run(app, spec.phase, batch_id, token)
    return [s.job_id for s in result.states]


def hand_on_run(app: MemqCelery, phase: Phase, batch_id: str, token: str) -> None:
    """The run waits for its next phase, leased until that message is in the broker
    (``JobTask.on_success`` drops the lease then); after the last phase it ends."""
    following = next_phase(phase)
    if following is None:
        app.runtime.leases.close(batch_id, token)
        batch_ended(app.scheduler, batch_id)  # after the hand-ons: one gather takes what waits
        return
    app.runtime.leases.hand_on(batch_id, token, following.value, expires=app.keeper.expiry())


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
            with log_context(**state.log_fields()):
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
    # before the states are freed: a broker fault retries finalize
    send_webhooks(app, runtime.settings.queues, states)
    runtime.metrics.jobs_ended(JobStatus.SUCCEEDED.value, len(states))
    for state in states:
        log.info(
            "job %s succeeded",
            state.job_id,
            extra=state.log_fields(),
        )
        runtime.states.forget(state.job_id, state.attempts)
    hand_on(app.scheduler, [(state.request.scope.key, state.job_id) for state in states])


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
            log.warning(
                "job %s left its batch in %s to retry alone: %s",
                state.job_id,
                phase,
                exc,
                extra=state.log_fields(),
            )
            delay = policy.delay_s(state.retries, exc.retry_after_s)
            send_alone(app.scheduler, state, phase, delay, since)
        else:
            record_failure(app.endings, state.job_id, exc)
