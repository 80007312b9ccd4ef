"""Micro-batches: jobs whose turn has come wait in a ready list until a gather task takes up to
``MEMQ_WORKER_BATCH_MAX_JOBS`` of them and sends the batch down the chain of phase tasks.

Making jobs ready also sends a gather task (one for the jobs a batch's end hands on together),
so no ready job waits for a later arrival; a gather that finds the list already emptied by an
earlier one ends at once, and the reaper sends one to a lane whose ready jobs lost theirs. Under
light load a gather takes the one job there is and starts at once. Under load (jobs made ready
in the lane fast enough that another is due within ``MEMQ_WORKER_BATCH_WAIT_MS``) it first
lingers that long so the batch can fill. At most ``MEMQ_WORKER_BATCHES_IN_FLIGHT`` batches of a
lane run at once: beyond that, ready jobs wait in the list, and the next batch to end gathers all
of them. That is what makes batches grow with the load: taking jobs as soon as they are ready
would only move the queue from the ready list into the broker, as many small batches. A batch
holds at most one job per session, so a session's jobs keep their order.

The batch's membership is kept in Redis under the gather's task id before anything else
happens: a gather delivered again after its worker died takes the same jobs, and once its
chain is sent (``launched``) it takes none.
"""

from __future__ import annotations

import logging
import time
import uuid

from kombu.exceptions import OperationalError

from pipeline.domain.jobs import JobStatus, job_record
from pipeline.domain.state import JobState, Phase
from pipeline.errors import TransientError
from workers.scheduler.core import Scheduler
from workers.scheduler.state_store import Lane, Taken, TakeOutcome

log = logging.getLogger("memq.worker")

LIVE, BACKFILL = Lane.LIVE, Lane.BACKFILL
LOST_BATCH_S = 120.0  # a batch that has not ended after this long no longer holds a slot
RECHECK_S = 1.0


def make_ready(sched: Scheduler, job_id: str, backfill: bool) -> None:
    """The job's turn has come: queue it for the next batch of its lane and send a gather."""
    make_ready_all(sched, [job_id], backfill)


def make_ready_all(sched: Scheduler, job_ids: list[str], backfill: bool) -> None:
    """``make_ready`` for jobs of one lane at once (those a batch's end hands on to): one
    gather for all of them, where one each would leave all but the first nothing to take."""
    lane = Lane.of(backfill)
    sched.states.push_ready(lane, *job_ids)
    try:
        send_gather(sched, lane)
    except OperationalError as exc:
        sched.states.unready(lane, *job_ids)
        raise TransientError(f"could not send a gather for jobs {job_ids}: {exc}") from exc


def send_gather(
    sched: Scheduler, lane: Lane, countdown: float | None = None, task_id: str | None = None
) -> None:
    """A gather task for ``lane``, on the I/O queue of that lane (``task_id``: the batch id of
    a gather sent again)."""
    sched.sender.gather(lane, countdown=countdown, task_id=task_id)


def gather(sched: Scheduler, batch_id: str, lane: Lane, token: str) -> list[str]:
    """Take a batch of ready jobs, mark them running and send their chain; returns the ids of
    the jobs it runs (none when another gather took them first). ``token`` owns the batch's
    run (``workers.scheduler.leases``) and hands it on to the first phase."""
    taken = take(sched, batch_id, lane)
    if taken.outcome is TakeOutcome.LAUNCHED:  # delivered again after its chain was sent
        return []
    if taken.outcome is TakeOutcome.NO_SLOT:  # every batch slot is taken; jobs wait for one
        recheck_later(sched, lane)
        return []
    if taken.jobs and linger(sched, lane, len(taken.jobs)):
        time.sleep(sched.worker.batch_wait_ms / 1000)
        more = take(sched, batch_id, lane)
        taken = more if more.outcome is TakeOutcome.TAKEN else taken
    if not taken.jobs:
        return []
    jobs = admit(sched, batch_id, lane, list(dict.fromkeys(taken.jobs)))
    if not jobs:
        sched.states.launched(batch_id)
        batch_ended(sched, batch_id)
        return []
    sched.states.save_many(jobs)
    mark_running(sched, jobs)
    ids = [job.job_id for job in jobs]
    # the run waits for its first phase, leased until the message is in the broker: a worker
    # dying in between leaves a lapse for the reaper, never a run nobody sends
    context = Phase.CONTEXT.value
    sched.leases.hand_on(batch_id, token, context, jobs=ids, expires=sched.expiry())
    sched.sender.chain(batch_id, ids, backfill=lane == BACKFILL)
    sched.leases.sent(batch_id, context, sched.pickup_by())
    sched.states.launched(batch_id)
    log.info("batch %s: %d job(s)", batch_id, len(ids))
    embed_ahead(sched, lane, jobs)
    slots = sched.worker.batches_in_flight
    since = sched.clock().timestamp() - LOST_BATCH_S
    if spreads(lane) and sched.states.room_for_more(lane, slots, since):
        try:
            send_gather(sched, lane)  # this batch took its share; another takes the rest
        except OperationalError as exc:  # the batches that end gather them instead
            log.warning("batch %s: no gather sent for the jobs left ready: %s", batch_id, exc)
    return ids


def embed_ahead(sched: Scheduler, lane: Lane, jobs: list[JobState]) -> None:
    """Send the jobs next in the batch's sessions' lines to have their new turns embedded
    while this batch runs (``memq.batch.prepare``, on the CPU queue): their retrieval then
    finds the vectors instead of calling the model when their turn comes. Live lane only (see
    ``embeds_ahead``). Best effort: a fault here costs that model call later, nothing else."""
    if not (sched.worker.embed_ahead and embeds_ahead(lane)):
        return
    try:
        following = sched.states.next_in_lines([job.request.scope.key for job in jobs])
        if following:
            sched.sender.prepare(following)
    except (TransientError, OperationalError) as exc:
        log.warning("no turns embedded ahead of their jobs: %s", exc)


def embeds_ahead(lane: Lane) -> bool:
    """Whether a batch of the lane has the next jobs of its sessions embedded ahead: live
    traffic's, whose batches wait on the LLM while the CPU worker is idle, so the embedding
    moves off the path of the next batch; not a backfill's, whose batches keep the CPU
    worker's processes busy, where the work would only move (measured slower,
    docs/BENCHMARKS.md)."""
    return lane == LIVE


def take(sched: Scheduler, batch_id: str, lane: Lane) -> Taken:
    worker = sched.worker
    now = sched.clock().timestamp()
    limit, in_flight = worker.batch_max_jobs, worker.batches_in_flight
    return sched.states.take_batch(
        batch_id,
        lane,
        limit=limit,
        in_flight=in_flight,
        now=now,
        lost_s=LOST_BATCH_S,
        spread=spreads(lane),
    )


def spreads(lane: Lane) -> bool:
    """Whether the lane's jobs are spread evenly over its batch slots: a backfill's, whose
    batches run every phase on the CPU worker's processes, one process each; not live
    traffic's, where halved batches measured slower against a shared embeddings endpoint
    (docs/BENCHMARKS.md)."""
    return lane == BACKFILL


def recheck_later(sched: Scheduler, lane: Lane) -> None:
    """Every batch slot is taken: the batches that end will gather what waits. In case none
    does (its worker died), one gather per lane comes back a second later, so no ready job
    waits on a lost batch for longer than LOST_BATCH_S."""
    if not sched.states.first_to_recheck(lane, RECHECK_S):
        return
    send_gather(sched, lane, countdown=RECHECK_S)


def batch_ended(sched: Scheduler, batch_id: str) -> None:
    """Free the batch's slot and gather whatever waits for one."""
    for lane in sched.states.batch_ended(batch_id, (LIVE, BACKFILL)):
        send_gather(sched, lane)


def linger(sched: Scheduler, lane: Lane, taken: int) -> bool:
    """Wait for the batch to fill only while jobs arrive fast enough that another is due
    within the wait (``arrivals_due``): a lone job, or a client sending one conversation after
    another, starts at once."""
    worker = sched.worker
    if taken >= worker.batch_max_jobs or worker.batch_wait_ms <= 0:
        return False
    return arrivals_due(sched.states.arrivals(lane), worker.batch_wait_ms)


def arrivals_due(per_second: int, wait_ms: int) -> bool:
    """Whether ``per_second`` jobs made ready in the lane this second bring another one within
    ``wait_ms``. Below that rate a linger is a delay paid by every job for a batch-mate that
    most likely does not come (a client sending one conversation after another, each about
    100 ms, makes about 8 a second: with 20 ms, lingering would add 20 ms to each of them)."""
    return per_second >= 2 and per_second * wait_ms >= 1000


def admit(sched: Scheduler, batch_id: str, lane: Lane, job_ids: list[str]) -> list[JobState]:
    """The jobs this batch runs: each still has its state, heads its session's line (one made
    ready out of turn is left out: it is still in its line, and the hand-on of the job ahead
    of it makes it ready again, so a session's order holds whatever put it in the list), and
    its turn is this batch's (not taken by another)."""
    states = sched.states
    states.admitted(lane, job_ids)
    sessions: set[str] = set()
    jobs: list[JobState] = []
    for state in states.load_many(job_ids):
        if state is None:  # ended meanwhile
            continue
        session = state.request.scope.key
        if session in sessions or not states.my_turn(session, state.job_id, sched.clock()):
            continue
        if not states.take_turn(state.job_id, state.attempts, owner=batch_id):
            continue  # another batch runs this attempt already
        sessions.add(session)
        jobs.append(state)
    return [job.with_(run=batch_id, batch_size=len(jobs)) for job in jobs]


def mark_running(sched: Scheduler, jobs: list[JobState]) -> None:
    """One bulk of ``running`` records. Best effort: the records say ``queued`` a little longer
    if it fails, and the jobs run all the same."""
    now = sched.clock()
    records = [job_record(job, JobStatus.RUNNING, now, phase=Phase.CONTEXT.value) for job in jobs]
    try:
        sched.records().save_jobs(records)
    except TransientError as exc:
        log.warning("could not mark %d job(s) running: %s", len(records), exc)


def send_alone(
    sched: Scheduler,
    state: JobState,
    phase: Phase,
    countdown: float,
    fault_since: float | None = None,
    *,
    retry: bool = True,
) -> None:
    """Run one job on by itself from ``phase`` after ``countdown`` seconds: it failed there
    while its batch-mates went on (``retry``: one more of its retries; its first task carries
    ``fault_since``, when the fault began, so the deadline holds), or its batch's worker died
    (the reaper splits the batch)."""
    if retry:
        solo = f"{state.job_id}.a{state.attempts}.r{state.retries + 1}"
        state = state.with_(run=solo, batch_size=1, retries=state.retries + 1)
    else:
        solo = f"{state.job_id}.a{state.attempts}.l{uuid.uuid4().hex[:8]}"
        state = state.with_(run=solo, batch_size=1)
    send_run(sched, solo, [state], phase, countdown=countdown, fault_since=fault_since)


def send_run(
    sched: Scheduler,
    run_id: str,
    states: list[JobState],
    phase: Phase,
    *,
    countdown: float = 0.0,
    fault_since: float | None = None,
) -> None:
    """Send jobs (of one lane, their states naming ``run_id``) on as the run ``run_id`` from
    ``phase``, after ``countdown`` seconds. The run first, leased until its message is safe in
    the broker or for as long as it is held back; then the states that name it (a state never
    names a run that does not exist); then its chain. A broker that refuses the chain raises
    ``OperationalError``, and the run's lease lapses for the reaper to send the jobs on."""
    ids = [state.job_id for state in states]
    backfill = states[0].backfill
    expires = sched.expiry() + countdown
    sched.leases.schedule(run_id, phase.value, ids, Lane.of(backfill), expires)
    sched.states.save_many(states)
    sched.sender.chain(
        run_id, ids, backfill=backfill, start=phase, fault_since=fault_since, countdown=countdown
    )
    if countdown <= 0:
        sched.leases.sent(run_id, phase.value, sched.pickup_by())
