"""The scheduler's steps over its memory stores, a memory job store and a sender that keeps the
messages it is given instead of handing them to a broker: making jobs ready, a gather taking a batch
(one job per session, a redelivery, every slot taken), the hand-on to a session's next job, a job
sent on alone, and the reaper (a lapsed batch split, a lapsed gather sent again, a job that killed
its worker too often ended, a queued message waited for, lines rescued). The broker, Celery and the
phases are the integration tests' (``test_batches.py``, ``test_worker_loss.py``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from kombu.exceptions import OperationalError

from pipeline.config import WorkerConfig
from pipeline.domain.jobs import JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.domain.state import JobState, Phase
from pipeline.errors import TransientError, WorkerLostError
from pipeline.ingestion.phases import Workload
from pipeline.store.memory import InMemoryStore
from workers.scheduler.batches import RECHECK_S, gather, make_ready, send_alone
from workers.scheduler.core import Scheduler
from workers.scheduler.keeper import Held, Keeper, give_up_for_retry, sent_on
from workers.scheduler.leases import GATHERING, Claim
from workers.scheduler.memory import MemoryRunLeases, MemoryStateStore
from workers.scheduler.reaper import claim_run, nudge_lanes, recover_lapsed, rescue_heads
from workers.scheduler.state_store import Lane
from workers.scheduler.turns import hand_on

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass
class Sent:
    """The messages a scheduler sent, in order; ``refuse`` plays a broker that is down."""

    gathers: list[tuple[Lane, float | None, str | None]] = field(default_factory=list)
    prepared: list[list[str]] = field(default_factory=list)
    chains: list[tuple[str, list[str], Phase, float | None]] = field(default_factory=list)
    refuse: bool = False
    depth: int = 0  # messages waiting in every queue

    def gather(
        self, lane: Lane, *, countdown: float | None = None, task_id: str | None = None
    ) -> None:
        self._check()
        self.gathers.append((lane, countdown, task_id))

    def prepare(self, job_ids: list[str]) -> None:
        self._check()
        self.prepared.append(job_ids)

    def chain(
        self,
        run_id: str,
        job_ids: list[str],
        *,
        backfill: bool,
        start: Phase = Phase.CONTEXT,
        fault_since: float | None = None,
        countdown: float | None = None,
    ) -> None:
        self._check()
        self.chains.append((run_id, job_ids, start, countdown))

    def queued(self, workload: Workload, lane: Lane) -> int:
        return self.depth

    def _check(self) -> None:
        if self.refuse:
            raise OperationalError("the broker is down")


@dataclass
class World:
    sched: Scheduler
    states: MemoryStateStore
    leases: MemoryRunLeases
    sent: Sent
    records: InMemoryStore
    failed: dict[str, BaseException]


def make_world(batch_max_jobs: int = 8, leases: MemoryRunLeases | None = None) -> World:
    states, sent, records = MemoryStateStore(), Sent(), InMemoryStore()
    leases = leases or MemoryRunLeases()
    worker = WorkerConfig(batch_wait_ms=0, batch_max_jobs=batch_max_jobs, batches_in_flight=2)
    keeper = Keeper(lambda: leases, worker, reap=lambda: None, clock=NOW.timestamp)
    failed: dict[str, BaseException] = {}
    sched = Scheduler(
        states=states,
        leases=leases,
        keeper=keeper,
        worker=worker,
        sender=sent,
        clock=lambda: NOW,
        records=lambda: records,
        fail_job=lambda job_id, exc: failed.setdefault(job_id, exc) is exc,
    )
    return World(sched, states, leases, sent, records, failed)


@pytest.fixture
def world() -> World:
    return make_world()


def accepted(world: World, session: str) -> JobState:
    """A job accepted into its session's line, as the intake leaves it."""
    request = AddRequest(
        messages=[MessageIn(role="user", content="I like tea")], scope=Scope(user_id=session)
    )
    state = JobState(job_id=uuid.uuid4().hex, request=request, received_at=NOW)
    world.states.enter(state, NOW)
    return state


def gathered(world: World, batch_id: str) -> list[str]:
    """What a gather task does: claim the batch's run, then take and launch the batch."""
    token = f"{batch_id}:x"
    expires, lane = world.sched.expiry(), Lane.LIVE
    claim = world.leases.claim(
        batch_id, GATHERING, task_id=batch_id, token=token, expires=expires, lane=lane
    )
    assert claim is Claim.OWN
    return gather(world.sched, batch_id, Lane.LIVE, token)


def test_a_job_made_ready_is_gathered(world: World) -> None:
    job = accepted(world, "ann")
    make_ready(world.sched, job.job_id, backfill=False)
    assert world.sent.gathers == [(Lane.LIVE, None, None)]
    assert world.states.ready_count(Lane.LIVE) == 1


def test_a_gather_the_broker_refuses_leaves_the_job_unready(world: World) -> None:
    job = accepted(world, "ann")
    world.sent.refuse = True
    with pytest.raises(TransientError):
        make_ready(world.sched, job.job_id, backfill=False)
    assert world.states.ready_count(Lane.LIVE) == 0
    assert not world.states.is_ready(Lane.LIVE, job.job_id)


def test_a_gather_launches_its_batch_under_a_lease_and_only_once(world: World) -> None:
    jobs = [accepted(world, "ann"), accepted(world, "bob")]
    for job in jobs:
        make_ready(world.sched, job.job_id, backfill=False)
    ids = [job.job_id for job in jobs]
    assert gathered(world, "b1") == ids
    assert world.sent.chains == [("b1", ids, Phase.CONTEXT, None)]
    assert world.leases.waiting("b1") == (Phase.CONTEXT.value, Lane.LIVE.value)
    assert world.leases.leases["b1"] == world.sched.pickup_by()
    loaded = world.states.load_many(ids)
    assert all(s is not None and s.run == "b1" and s.batch_size == 2 for s in loaded)
    assert {r.status for r in world.records.get_jobs(ids).values() if r} == {JobStatus.RUNNING}
    # a redelivered gather takes nothing and sends nothing more
    assert gather(world.sched, "b1", Lane.LIVE, "b1:y") == []
    assert len(world.sent.chains) == 1


def test_a_batch_runs_one_job_per_session_in_order(world: World) -> None:
    first, second = accepted(world, "ann"), accepted(world, "ann")
    make_ready(world.sched, second.job_id, backfill=False)  # out of turn: left in its line
    make_ready(world.sched, first.job_id, backfill=False)
    assert gathered(world, "b1") == [first.job_id]


def test_the_live_batch_embeds_the_next_turns_of_its_sessions_ahead(world: World) -> None:
    first, second = accepted(world, "ann"), accepted(world, "ann")
    make_ready(world.sched, first.job_id, backfill=False)
    gathered(world, "b1")
    assert world.sent.prepared == [[second.job_id]]


def test_with_every_slot_taken_one_gather_comes_back_later() -> None:
    world = make_world(batch_max_jobs=1)  # one job a batch: three batches wanted, two slots
    for session in ("ann", "bob", "cid"):
        make_ready(world.sched, accepted(world, session).job_id, backfill=False)
    assert len(gathered(world, "b1")) == 1
    assert len(gathered(world, "b2")) == 1
    before = len(world.sent.gathers)
    assert gathered(world, "b3") == []
    assert gathered(world, "b4") == []
    assert world.sent.gathers[before:] == [(Lane.LIVE, RECHECK_S, None)]  # once per interval


def test_a_job_that_ends_hands_its_line_on(world: World) -> None:
    first, second = accepted(world, "ann"), accepted(world, "ann")
    world.states.forget(first.job_id, first.attempts)
    hand_on(world.sched, [(first.request.scope.key, first.job_id)])
    assert world.states.heads_line(second.request.scope.key, second.job_id)
    assert world.states.is_ready(Lane.LIVE, second.job_id)
    assert world.sent.gathers == [(Lane.LIVE, None, None)]


def test_a_job_sent_on_alone_is_a_leased_run_of_its_own(world: World) -> None:
    job = accepted(world, "ann").with_(run="b1", batch_size=3)
    send_alone(world.sched, job, Phase.EMBED, countdown=4.0, fault_since=100.0)
    (run_id, ids, start, countdown), *_ = world.sent.chains
    assert (ids, start, countdown) == ([job.job_id], Phase.EMBED, 4.0)
    saved = world.states.load(job.job_id)
    assert saved is not None and saved.run == run_id and saved.retries == 1
    assert world.leases.leases[run_id] == world.sched.expiry() + 4.0  # held back: leased
    assert world.leases.waiting(run_id) == (Phase.EMBED.value, Lane.LIVE.value)


# -- the reaper ---------------------------------------------------------------------------------


def launched(world: World, *sessions: str) -> list[JobState]:
    """A batch ``b1`` of one job per session, launched and running its first phase under a
    lease that lapses at ``world.sched.expiry()``."""
    jobs = [accepted(world, session) for session in sessions]
    for job in jobs:
        make_ready(world.sched, job.job_id, backfill=False)
    gathered(world, "b1")
    claim = world.leases.claim(
        "b1", Phase.CONTEXT.value, task_id="t", token="t:a", expires=world.sched.expiry()
    )
    assert claim is Claim.OWN
    return jobs


def test_a_lapsed_batch_sends_each_job_on_alone(world: World) -> None:
    jobs = launched(world, "ann", "bob")
    world.sent.chains.clear()
    recover_lapsed(world.sched, world.sched.expiry() + 1)
    alone = {ids[0]: (start, countdown) for _, ids, start, countdown in world.sent.chains}
    assert alone == {job.job_id: (Phase.CONTEXT, 0) for job in jobs}
    assert not world.leases.exists("b1")
    assert all(world.leases.deliveries[job.job_id] == 1 for job in jobs)


def test_a_lapse_before_its_time_or_while_its_message_is_queued_waits(world: World) -> None:
    launched(world, "ann")
    world.sent.chains.clear()
    recover_lapsed(world.sched, world.sched.expiry() - 1)  # not lapsed yet
    assert world.leases.hand_on("b1", "t:a", Phase.RETRIEVE.value, expires=NOW.timestamp())
    world.sent.depth = 3  # the workers are busy: the message is most likely in the queue
    recover_lapsed(world.sched, world.sched.expiry())
    assert world.sent.chains == []
    assert world.leases.leases["b1"] == world.sched.pickup_by()  # deferred


def test_a_job_whose_worker_died_too_often_ends_dead(world: World) -> None:
    (job,) = launched(world, "ann")
    for _ in range(world.sched.worker.max_deliveries - 1):
        world.leases.delivered(job.job_id)
    world.sent.chains.clear()
    recover_lapsed(world.sched, world.sched.expiry() + 1)
    assert isinstance(world.failed[job.job_id], WorkerLostError)
    assert world.sent.chains == []


def test_a_gather_lost_before_its_launch_is_sent_again_under_its_id(world: World) -> None:
    make_ready(world.sched, accepted(world, "ann").job_id, backfill=False)
    world.leases.claim(
        "g1", GATHERING, task_id="g1", token="g1:a", expires=NOW.timestamp(), lane="live"
    )
    world.sent.gathers.clear()
    recover_lapsed(world.sched, NOW.timestamp() + 1)
    assert world.sent.gathers == [(Lane.LIVE, None, "g1")]


def test_a_redelivered_task_recovers_its_run_at_once(world: World) -> None:
    (job,) = launched(world, "ann")
    world.sent.chains.clear()
    assert claim_run(world.sched, "t", "b1", Phase.CONTEXT.value) is None  # t died owning it
    assert [ids for _, ids, _, _ in world.sent.chains] == [[job.job_id]]


def test_the_line_heads_nothing_runs_are_rescued(world: World) -> None:
    ended, behind = accepted(world, "ann"), accepted(world, "ann")
    world.states.delete(ended.job_id)  # its state is gone: the job behind it is made ready
    orphan = accepted(world, "bob")  # accepted long ago, never made ready
    runless = accepted(world, "cid").with_(run="gone")  # its run's record is gone
    world.states.save(runless)
    later = NOW.timestamp() + world.sched.worker.orphan_after_s + 1
    rescue_heads(world.sched, world.states.line_heads(100), later)
    assert world.states.is_ready(Lane.LIVE, behind.job_id)
    assert world.states.is_ready(Lane.LIVE, orphan.job_id)
    assert [ids for _, ids, _, _ in world.sent.chains] == [[runless.job_id]]


def test_a_lane_with_ready_jobs_is_sent_a_gather(world: World) -> None:
    world.states.push_ready(Lane.BACKFILL, "job-1")
    nudge_lanes(world.sched)
    assert world.sent.gathers == [(Lane.BACKFILL, None, None)]


# -- a task's hand-offs with Redis away -----------------------------------------------------------


class AwayLeases(MemoryRunLeases):
    """Run leases whose Redis goes away on ``away = True``: the hand-offs a task makes as it
    retries or ends raise ``TransientError``, as ``RunLeases`` then does."""

    away = False

    def hand_on(self, *args: Any, **kwargs: Any) -> bool:
        self._check()
        return super().hand_on(*args, **kwargs)

    def sent(self, run_id: str, phase: str, pickup_by: float) -> None:
        self._check()
        super().sent(run_id, phase, pickup_by)

    def _check(self) -> None:
        if self.away:
            raise TransientError("hand on a run: Redis ConnectionError: connection refused")


def owned_in_context(world: World) -> None:
    """The task ``t`` of ``launched``, holding its run ``b1`` in the keeper as a claim does."""
    world.sched.keeper.hold("t", Held("b1", "t:a", Phase.CONTEXT.value))


@pytest.fixture
def away_world() -> World:
    return make_world(leases=AwayLeases())


def redis_of(world: World) -> AwayLeases:
    assert isinstance(world.leases, AwayLeases)
    return world.leases


def test_a_retry_leaves_its_run_ownerless_for_the_longest_backoff(away_world: World) -> None:
    launched(away_world, "ann")
    owned_in_context(away_world)
    assert give_up_for_retry(away_world.sched.keeper, away_world.leases, "t", held_back_s=30)
    assert away_world.leases.waiting("b1") == (Phase.CONTEXT.value, Lane.LIVE.value)
    assert away_world.leases.leases["b1"] == away_world.sched.expiry() + 30
    assert away_world.sched.keeper.release("t") is None


def test_a_retry_with_redis_away_leaves_its_run_to_lapse_to_the_reaper(
    away_world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """No exception (one here would fail the task, and could end its job ``dead``), no retry
    (it would wait for the broker inside the task): the run, still owned and renewed by
    nobody, lapses, and the reaper sends its job on."""
    (job,) = launched(away_world, "ann")
    owned_in_context(away_world)
    redis_of(away_world).away = True
    assert not give_up_for_retry(away_world.sched.keeper, away_world.leases, "t", held_back_s=30)
    assert away_world.sched.keeper.release("t") is None  # no longer renewed
    assert "lease lapses and the reaper recovers it" in caplog.text
    redis_of(away_world).away = False
    away_world.sent.chains.clear()
    recover_lapsed(away_world.sched, away_world.sched.expiry() + 1)
    assert [ids for _, ids, _, _ in away_world.sent.chains] == [[job.job_id]]


def test_a_next_message_marked_sent_waits_for_its_pickup(away_world: World) -> None:
    launched(away_world, "ann")
    owned_in_context(away_world)
    assert away_world.leases.hand_on("b1", "t:a", Phase.RETRIEVE.value)
    sent_on(away_world.sched.keeper, away_world.leases, "t", lambda _: Phase.RETRIEVE.value)
    assert away_world.leases.leases["b1"] == away_world.sched.pickup_by()


def test_a_next_message_sent_with_redis_away_leaves_a_lapse_not_an_error(
    away_world: World, caplog: pytest.LogCaptureFixture
) -> None:
    (job,) = launched(away_world, "ann")
    owned_in_context(away_world)
    assert away_world.leases.hand_on("b1", "t:a", Phase.RETRIEVE.value, expires=NOW.timestamp())
    redis_of(away_world).away = True
    sent_on(away_world.sched.keeper, away_world.leases, "t", lambda _: Phase.RETRIEVE.value)
    assert "cannot mark its next message sent in context" in caplog.text
    redis_of(away_world).away = False
    away_world.sent.chains.clear()
    recover_lapsed(away_world.sched, NOW.timestamp() + 1)
    assert [(ids, start) for _, ids, start, _ in away_world.sent.chains] == [
        ([job.job_id], Phase.RETRIEVE)
    ]
