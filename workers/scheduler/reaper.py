"""The reaper: recovers what lost its owner. Run by one keeper at a time
(``workers.scheduler.keeper``) every ``reaper_interval_s``, and by a task that finds an earlier
delivery of its own message died running it (``claim_run``).

It takes the runs whose lease lapsed and sends their jobs on (a gather again under the same
id), walks a slice of the session lines for a head that nothing runs, finishes intakes that
died half-way, takes in jobs accepted while a store was down, and sends a gather to each lane
with ready jobs.
"""

from __future__ import annotations

import logging
import uuid

import redis

from pipeline.adapters.redis_errors import redis_errors
from pipeline.domain.state import JobState, Phase
from pipeline.errors import TransientError, WorkerLostError
from pipeline.ingestion.phases import PHASES
from workers.aof import rewrite_aof_if_due
from workers.intake import IntakeParts, drain_parked, finish_intakes, record_held
from workers.scheduler.batches import (
    BACKFILL,
    batch_ended,
    make_ready,
    send_alone,
    send_gather,
)
from workers.scheduler.core import Scheduler
from workers.scheduler.keeper import Held
from workers.scheduler.leases import GATHERING, Claim, RunRecord
from workers.scheduler.state_store import Lane

log = logging.getLogger("memq.worker")


def claim_run(
    sched: Scheduler, task_id: str, run_id: str, phase: str, lane: Lane | None = None
) -> str | None:
    """Own ``phase`` of the run for this execution of the task ``task_id`` (its lease then
    renewed by the keeper); None when this execution must do nothing: the run ended or moved
    on, another execution owns it, or an earlier delivery of this message died running it
    (then the run is recovered here at once, as the reaper would)."""
    token = f"{task_id}:{uuid.uuid4().hex}"
    leases = sched.leases
    verdict = leases.claim(
        run_id, phase, task_id=task_id, token=token, expires=sched.expiry(), lane=lane or ""
    )
    if verdict is Claim.OWN:
        sched.keeper.hold(task_id, Held(run_id, token, phase))
        return token
    if verdict is Claim.REDELIVERED:
        log.warning("run %s: redelivered after its worker died in %s", run_id, phase)
        record = leases.take(run_id, float("inf"))
        if record is not None:
            recover_run(sched, record)
    return None


LINES_PER_SWEEP = 500


def reap(sched: Scheduler, intake: IntakeParts, redis_client: redis.Redis) -> None:
    """Take every run whose lease lapsed and recover it (``recover_run``), look at a slice of
    the session lines for a head that nothing runs (``rescue_heads``), finish the intakes that
    died between a job's record and its start (``finish_intakes``), take in the jobs accepted
    while a store was down (``take_in_held_jobs``), and send a gather to each lane that has
    jobs ready (``nudge_lanes``)."""
    now = sched.clock().timestamp()
    recover_lapsed(sched, now)
    rescue_heads(sched, sched.states.line_heads(LINES_PER_SWEEP), now)
    take_in_held_jobs(intake)
    finish_intakes(intake, now - sched.worker.orphan_after_s)
    nudge_lanes(sched)
    with redis_errors("rewrite the append-only file"):
        rewrite_aof_if_due(redis_client)  # an erasure's, when its turn came meanwhile


def recover_lapsed(sched: Scheduler, now: float) -> None:
    """Every run whose lease lapsed before ``now``, taken and recovered (``recover_run``),
    unless its message still waits in its queue (``still_queued``)."""
    for run_id in sched.leases.lapsed(now):
        if still_queued(sched, run_id):
            continue
        record = sched.leases.take(run_id, now)
        if record is not None:
            log.warning("run %s lost its owner in %s: recovering it", run_id, record.phase)
            recover_run(sched, record)


def take_in_held_jobs(intake: IntakeParts) -> None:
    """Jobs accepted while one store was down: records written for those held in Redis
    (``record_held``), lines joined by those parked in Elasticsearch (``drain_parked``). Each
    is tried whatever the other does; a store still down leaves its part for the next sweep."""
    try:
        record_held(intake)
    except TransientError as exc:
        log.warning("jobs accepted without a record wait for Elasticsearch: %s", exc)
    drain_parked(intake)


def nudge_lanes(sched: Scheduler) -> None:
    """One gather for each lane with ready jobs. Gathers are sent when a job is made ready and
    when a batch ends; this one covers a gather lost with its worker, so a ready job never
    waits for the next arrival. A gather with nothing to take, or no batch slot free, ends at
    once."""
    for lane in Lane:
        if sched.states.ready_count(lane):
            send_gather(sched, lane)


def still_queued(sched: Scheduler, run_id: str) -> bool:
    """A run nobody owns whose phase's queue still has messages waiting: its message is most
    likely among them (the workers are busy or down), so its deadline moves on instead of its
    jobs being sent again, which would only add to the queue. A message lost with a worker
    that had reserved it is not in the queue: once the queue is empty, the run is recovered."""
    waiting = sched.leases.waiting(run_id)
    if waiting is None or waiting[0] == GATHERING:
        return False
    phase, lane = waiting
    spec = next((s for s in PHASES if s.phase.value == phase), None)
    if spec is None:
        return False
    depth = sched.sender.queued(spec.workload, Lane.BACKFILL if lane == BACKFILL else Lane.LIVE)
    return depth > 0 and sched.leases.defer(run_id, sched.pickup_by())


def rescue_heads(sched: Scheduler, heads: list[tuple[str, str]], now: float) -> None:
    """A session's line head with no live owner is run, so nothing waits behind a job that no
    longer runs: one whose state is gone leaves the line (the next is made ready); one whose
    run is gone (no record: its batch ended without it, or predates run records) is sent on
    alone from its first unfinished phase; one never started (intake or hand-on lost) is made
    ready once it was accepted ``orphan_after_s`` ago and is not among its lane's ready jobs
    (or that lane has none: a marker that outlived its list entry costs no more than that).

    ``heads`` are (line, job id) pairs. Their states, their runs and their acceptance times are
    each read in one round trip for the whole slice: a sweep over hundreds of busy lines, one
    read at a time, was a tenth of the I/O worker's time under load."""
    states = sched.states.load_many([job_id for _, job_id in heads])
    live = sched.leases.existing([s.run for s in states if s is not None and s.run is not None])
    unstarted = [s.job_id for s in states if s is not None and s.run is None]
    accepted = sched.states.accepted_many(unstarted)
    for (line, job_id), state in zip(heads, states, strict=True):
        if state is None:
            hand_on_from(sched, line, job_id)
        elif state.run is not None:
            if state.run not in live:
                send_on_runless(sched, state)
        elif state.unrecorded:
            continue  # accepted while Elasticsearch was down: record_held starts it
        elif now - (accepted.get(job_id) or now) > sched.worker.orphan_after_s:
            start_orphan(sched, state)


def send_on_runless(sched: Scheduler, state: JobState) -> None:
    """The head names a run that is gone: sent on alone from its first unfinished phase."""
    log.warning("job %s heads its line with no run: sent on", state.job_id)
    phase = next((s.phase for s in PHASES if not state.is_done(s.phase)), Phase.FINALIZE)
    send_alone(sched, state, phase, 0, retry=False)


def hand_on_from(sched: Scheduler, line: str, job_id: str) -> None:
    """The head's state is gone (it ended): it leaves its line, and the job behind it is made
    ready."""
    following = sched.states.leave_line_at(line, job_id)
    if following is not None and (waiting := sched.states.load(following)) is not None:
        make_ready(sched, following, waiting.backfill)


def start_orphan(sched: Scheduler, state: JobState) -> None:
    """A head accepted long ago and never started: made ready, unless it waits among its lane's
    ready jobs already."""
    states = sched.states
    lane = Lane.of(state.backfill)
    if not (states.is_ready(lane, state.job_id) and states.ready_count(lane)):
        log.warning("job %s heads its line and was never started: made ready", state.job_id)
        make_ready(sched, state.job_id, state.backfill)


def recover_run(sched: Scheduler, record: RunRecord) -> None:
    """A run lost its owner. An unlaunched batch: its gather is sent again under the same id
    (it takes the same jobs). Otherwise each job still in the run is sent on alone from the
    phase the run was at, so a job that kills its worker takes no batch-mate down again; a job
    whose worker died ``max_deliveries`` times ends ``dead`` with the reason."""
    if record.phase == GATHERING:
        send_gather(sched, Lane(record.lane), task_id=record.run_id)
        return
    phase = Phase(record.phase)
    limit = sched.worker.max_deliveries
    for state in sched.states.load_many(record.jobs):
        if state is None or state.run != record.run_id:
            continue  # ended, or left the batch
        lost = sched.leases.delivered(state.job_id) if record.owned else 0
        if lost >= limit:
            reason = (
                f"its worker died {lost} times while running phase {phase.value} (killed, out "
                f"of memory, or over the {sched.worker.task_time_limit_s} s time "
                "limit); not run again"
            )
            sched.fail_job(state.job_id, WorkerLostError(reason))
        else:
            send_alone(sched, state, phase, 0, retry=False)
    batch_ended(sched, record.run_id)
