"""Extraction in waves: a batch's jobs whose LLM calls have returned go on without waiting for
the slowest call of the batch.

A batch's calls take as long as the provider does: with a hosted model (about a second each,
some three), a batch of twenty waits for the slowest of twenty calls, and so does every session
in it, whose next conversation cannot start before this one ends. So a job whose call has
returned waits for its batch-mates at most ``MEMQ_WORKER_WAVE_MS`` (e.g. 500 ms; ``wave_due``):
then the jobs done by then go on together as a run of their own, a *wave* (``{batch}.w1-…``,
``.w2-…``), from the next phase, while the batch waits for the rest. The jobs whose calls end
last stay in the batch and go on with it. When the calls all end within that wait (a local or
an instant model), nothing is split and nothing costs more: 200 conversations of an instant
model handed to the intake at once formed no wave at the default 500 ms. Every job waits on
its session's path (the session's next conversation waits for it), so the wait is bounded by
the clock alone: an earlier rule that also waited for the calls to go quiet held a job with a
short call for a second and more while its batch-mates kept answering, and a hosted-like
model's run was 1.13 times faster without it (docs/BENCHMARKS.md). 0 keeps every batch whole.

A wave is sent as a job sent on alone is (``workers.scheduler.batches.send_run``): its run is
scheduled and leased first, then the states that name it are saved, then its chain is sent.
Its jobs leave the batch (their states name the wave), so the batch's later tasks and the
reaper's recovery of the batch skip them, and a wave lost with its worker is recovered like
any run. The first wave gives the batch's slot up (``batch_ended``): the jobs the waves hand
on must not wait for the batch's slowest call to get a batch of their own.

A live batch whose calls are still out after ``MEMQ_WORKER_WAVE_MS`` gives its slot up too,
wave or not (``frees_slot_while_waiting``): it now waits on the provider, not on the workers,
and the slots exist to bound the batches competing for the workers. Jobs that were waiting
for a slot (sessions whose first conversations arrived while both slots were taken, a lone
job's batch among them) start then, not after the slowest call of a batch they are not in.
Not a backfill's batch: it waits holding one of the CPU worker's processes, so another batch
could not start anyway, and its batches would only get smaller.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from time import perf_counter

from celery.exceptions import SoftTimeLimitExceeded
from kombu.exceptions import OperationalError

from pipeline.domain.state import JobState
from pipeline.errors import MemqError
from pipeline.ingestion.batch import BatchResult
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases import PhaseSpec, next_phase
from workers.scheduler.batches import batch_ended, send_run
from workers.scheduler.core import Scheduler

log = logging.getLogger("memq.worker")

TICK_S = 0.05  # how often the driver looks at the clock while no call returns


def wave_due(now: float, first_held: float, wave_ms: int) -> bool:
    """Whether the jobs done and held go on now: the first of them has waited ``wave_ms``
    for its batch-mates since its call returned (``first_held``). A wave of one costs a chain
    of tasks, so that wait gathers the calls that end close together; a longer one would
    delay the sessions of the jobs held, each waiting on its own path."""
    return now - first_held >= wave_ms / 1000


def run_in_waves(
    sched: Scheduler,
    spec: PhaseSpec,
    batch_id: str,
    token: str,
    states: list[JobState],
    *,
    deps: Deps,
    fallback: Callable[[list[JobState]], BatchResult],
) -> BatchResult:
    """``spec.each`` over the batch's jobs, sending those that are done on in waves while
    other calls still run. Returns what stays with the batch: the jobs done last (and those
    that had done the phase already), and every failure. A bug met on the way (an exception
    that is not memq's) leaves the jobs not sent yet to ``fallback``, the phase's guarded
    batch run, which meets it again job by job."""
    assert spec.each is not None
    wave_ms = sched.worker.wave_ms
    result = BatchResult(states=[s for s in states if s.is_done(spec.phase)])
    todo = [s for s in states if not s.is_done(spec.phase)]
    remaining = len(todo)
    held: list[tuple[float, JobState]] = []  # (its call's return, its new state), oldest first
    gone: set[str] = set()  # sent on in a wave
    waves = 0
    sending = True
    started = perf_counter()
    free_at = started + wave_ms / 1000 if frees_slot_while_waiting(states) else None
    freed = False  # the batch's slot, given up before the batch ends
    try:
        for outcome in spec.each(todo, deps, TICK_S):
            now = perf_counter()
            if outcome is not None:
                remaining -= 1
                job_id, ended = outcome
                if isinstance(ended, MemqError):
                    result.failures[job_id] = ended
                else:
                    latency = now - started
                    done = ended.completed(spec.phase, latency * 1000)
                    held.append((now, done))
            if sending and remaining and held and wave_due(now, held[0][0], wave_ms):
                waves += 1
                wave = [state for _, state in held]
                sending = send_wave(sched, spec, batch_id, token, wave, number=waves)
                if sending:
                    gone.update(state.job_id for state in wave)
                    held = []
                    freed = freed or free_slot(sched, batch_id, "a wave went on")
            if remaining and not freed and free_at is not None and now >= free_at:
                freed = free_slot(sched, batch_id, f"calls still out after {wave_ms} ms")
                free_at = None  # tried once: otherwise a wave or the batch's end frees it
    except (SoftTimeLimitExceeded, MemqError):
        raise
    except Exception:
        log.exception("phase %s of batch %s failed in waves; job by job", spec.phase, batch_id)
        return fallback([s for s in states if s.job_id not in gone])
    result.states += [state for _, state in held]
    return result


def send_wave(
    sched: Scheduler,
    spec: PhaseSpec,
    batch_id: str,
    token: str,
    states: list[JobState],
    *,
    number: int,
) -> bool:
    """Send ``states`` on from the phase after ``spec``'s as the run ``{batch_id}.w{number}-…``
    (unique: a retried execution of the batch's task numbers its waves from 1 again).
    False, sending nothing, when this execution no longer owns the batch (it lost its lease:
    the reaper sends the batch's jobs on, and nothing this execution computed is kept)."""
    if not sched.leases.owns(batch_id, token):
        return False
    following = next_phase(spec.phase)
    assert following is not None  # extract is not the last phase
    wave = f"{batch_id}.w{number}-{uuid.uuid4().hex[:6]}"
    try:
        send_run(sched, wave, [state.with_(run=wave) for state in states], following)
    except OperationalError as exc:  # its lease lapses and the reaper sends the jobs on
        log.warning("wave %s: not sent (%s); the reaper sends it on", wave, exc)
        return True
    log.info("wave %s: %d job(s) go on ahead of their batch", wave, len(states))
    return True


def frees_slot_while_waiting(states: list[JobState]) -> bool:
    """Whether the batch gives its slot up while its calls are out: a live batch's (see the
    module docstring)."""
    return bool(states) and not states[0].backfill


def free_slot(sched: Scheduler, batch_id: str, why: str) -> bool:
    """Give the batch's slot up before it ends and gather what waits for one. Best effort:
    when Redis or the broker fails here, the batch frees its slot when it ends, as always."""
    try:
        batch_ended(sched, batch_id)
    except (MemqError, OperationalError) as exc:
        log.warning("batch %s keeps its slot (%s): %s", batch_id, why, exc)
        return False
    log.info("batch %s: slot given up (%s)", batch_id, why)
    return True
