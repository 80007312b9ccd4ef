"""The scheduler's rules on its state, over ``MemoryStateStore`` and ``MemoryRunLeases``: taking
a batch (its size, the lane's slots, a batch lost or launched, spreading a backfill), the
session lines (order, a lost head, one batch per turn), and run leases (one owner per phase, a
lapsed lease taken once, the pick-up deadline). The same tests run over the Redis stores and
their Lua scripts in ``tests/integration/test_scheduler_contract.py``; the fixtures ``states``
and ``leases`` are all that differs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.domain.state import JobState
from workers.scheduler.leases import GATHERING, Claim
from workers.scheduler.memory import MemoryRunLeases, MemoryStateStore
from workers.scheduler.protocols import SchedulerLeases, SchedulerStates
from workers.scheduler.state_store import Lane, TakeOutcome

NOW = 1_000_000.0
ACCEPTED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def states() -> SchedulerStates:
    return MemoryStateStore()


@pytest.fixture
def leases() -> SchedulerLeases:
    return MemoryRunLeases()


def ids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{uuid.uuid4().hex[:8]}-{n:02d}" for n in range(count)]


def take(
    states: SchedulerStates,
    batch_id: str,
    lane: Lane = Lane.LIVE,
    *,
    limit: int = 20,
    slots: int = 2,
    now: float = NOW,
    spread: bool = False,
) -> tuple[TakeOutcome, list[str]]:
    taken = states.take_batch(
        batch_id, lane, limit=limit, in_flight=slots, now=now, lost_s=120.0, spread=spread
    )
    return taken.outcome, taken.jobs


def state(session: str, job_id: str | None = None) -> JobState:
    request = AddRequest(
        messages=[MessageIn(role="user", content="I like tea")], scope=Scope(user_id=session)
    )
    return JobState(job_id=job_id or uuid.uuid4().hex, request=request, received_at=ACCEPTED)


# -- taking a batch ----------------------------------------------------------------------------


def test_a_batch_takes_ready_jobs_in_order_up_to_its_limit(states: SchedulerStates) -> None:
    jobs = ids("job", 5)
    states.push_ready(Lane.LIVE, *jobs)
    assert take(states, "b1", limit=3) == (TakeOutcome.TAKEN, jobs[:3])
    assert states.ready_count(Lane.LIVE) == 2


def test_a_redelivered_gather_takes_the_same_jobs_and_none_once_launched(
    states: SchedulerStates,
) -> None:
    jobs = ids("job", 3)
    states.push_ready(Lane.LIVE, *jobs)
    assert take(states, "b1", limit=3) == (TakeOutcome.TAKEN, jobs)
    assert take(states, "b1", limit=3) == (TakeOutcome.TAKEN, jobs)  # kept, not taken again
    states.launched("b1")
    assert take(states, "b1", limit=3) == (TakeOutcome.LAUNCHED, [])


def test_an_empty_lane_gives_an_empty_batch(states: SchedulerStates) -> None:
    assert take(states, "b1") == (TakeOutcome.TAKEN, [])


def test_no_new_batch_while_every_slot_is_taken_until_one_ends(states: SchedulerStates) -> None:
    states.push_ready(Lane.LIVE, *ids("job", 6))
    assert take(states, "b1", limit=2)[0] is TakeOutcome.TAKEN
    assert take(states, "b2", limit=2)[0] is TakeOutcome.TAKEN
    assert take(states, "b3", limit=2) == (TakeOutcome.NO_SLOT, [])
    assert states.batch_ended("b1", (Lane.LIVE, Lane.BACKFILL)) == [Lane.LIVE]  # jobs wait
    outcome, jobs = take(states, "b3", limit=2)
    assert outcome is TakeOutcome.TAKEN and len(jobs) == 2


def test_the_lanes_have_slots_of_their_own(states: SchedulerStates) -> None:
    states.push_ready(Lane.LIVE, *ids("live", 2))
    states.push_ready(Lane.BACKFILL, *ids("backfill", 2))
    assert take(states, "b1", Lane.BACKFILL, limit=1, slots=1)[0] is TakeOutcome.TAKEN
    assert take(states, "b2", Lane.BACKFILL, limit=1, slots=1)[0] is TakeOutcome.NO_SLOT
    assert take(states, "b3", Lane.LIVE, limit=1, slots=1)[0] is TakeOutcome.TAKEN


def test_a_batch_lost_for_longer_than_lost_s_frees_its_slot(states: SchedulerStates) -> None:
    states.push_ready(Lane.LIVE, *ids("job", 3))
    assert take(states, "b1", limit=1, slots=1)[0] is TakeOutcome.TAKEN
    assert take(states, "b2", limit=1, slots=1, now=NOW + 60)[0] is TakeOutcome.NO_SLOT
    assert take(states, "b2", limit=1, slots=1, now=NOW + 121)[0] is TakeOutcome.TAKEN


def test_a_backfill_spreads_its_jobs_over_its_slots(states: SchedulerStates) -> None:
    """20 jobs over 2 slots: two batches of 10, not one of 20 and an idle slot."""
    states.push_ready(Lane.BACKFILL, *ids("job", 20))
    first = take(states, "b1", Lane.BACKFILL, spread=True)[1]
    second = take(states, "b2", Lane.BACKFILL, spread=True)[1]
    assert (len(first), len(second)) == (10, 10)


def test_a_small_backfill_is_not_split(states: SchedulerStates) -> None:
    """Below SPREAD_FROM (8) jobs a second batch costs more than it saves."""
    jobs = ids("job", 6)
    states.push_ready(Lane.BACKFILL, *jobs)
    assert take(states, "b1", Lane.BACKFILL, spread=True) == (TakeOutcome.TAKEN, jobs)


def test_a_released_batch_gives_its_jobs_back_to_the_front(states: SchedulerStates) -> None:
    jobs = ids("job", 4)
    states.push_ready(Lane.LIVE, *jobs)
    assert take(states, "b1", limit=2)[1] == jobs[:2]
    assert states.release_batch("b1", Lane.LIVE) == jobs[:2]
    assert take(states, "b2", limit=4) == (TakeOutcome.TAKEN, jobs)


def test_room_for_more_needs_waiting_jobs_and_a_free_slot(states: SchedulerStates) -> None:
    states.push_ready(Lane.LIVE, *ids("job", 3))
    take(states, "b1", limit=1)
    assert states.room_for_more(Lane.LIVE, 2, since=NOW - 120)
    take(states, "b2", limit=1)
    assert not states.room_for_more(Lane.LIVE, 2, since=NOW - 120)
    assert states.room_for_more(Lane.LIVE, 2, since=NOW + 1)  # both started before: lost


def test_a_gathered_job_is_no_longer_waiting_to_be_gathered(states: SchedulerStates) -> None:
    job, other = ids("job", 2)
    states.push_ready(Lane.LIVE, job, other)
    assert states.is_ready(Lane.LIVE, job)
    states.admitted(Lane.LIVE, [job])
    assert not states.is_ready(Lane.LIVE, job)
    states.unready(Lane.LIVE, other)
    assert not states.is_ready(Lane.LIVE, other)
    assert states.ready_count(Lane.LIVE) == 1


# -- session lines and turns ---------------------------------------------------------------------


def test_a_session_line_keeps_the_order_of_acceptance(states: SchedulerStates) -> None:
    session = f"user-{uuid.uuid4().hex}"
    first, second = state(session), state(session)
    assert states.enter(first, ACCEPTED)
    assert not states.enter(second, ACCEPTED)
    assert not states.enter(second, ACCEPTED)  # an intake finished twice keeps its place
    key = first.request.scope.key
    assert states.heads_line(key, first.job_id)
    assert states.next_in_lines([key]) == [second.job_id]
    assert states.accepted_at(first.job_id) == ACCEPTED.timestamp()
    assert states.leave_line(key, first.job_id) == second.job_id  # the hand-on's next job
    assert states.leave_line(key, second.job_id) is None


def test_a_head_whose_state_is_gone_does_not_block_its_line(states: SchedulerStates) -> None:
    session = f"user-{uuid.uuid4().hex}"
    lost, waiting = state(session), state(session)
    states.enter(lost, ACCEPTED)
    states.enter(waiting, ACCEPTED)
    key = lost.request.scope.key
    assert not states.my_turn(key, waiting.job_id, ACCEPTED)
    states.delete(lost.job_id)
    assert states.my_turn(key, waiting.job_id, ACCEPTED)
    assert states.heads_line(key, waiting.job_id)


def test_one_batch_takes_a_turn(states: SchedulerStates) -> None:
    job = uuid.uuid4().hex
    assert states.take_turn(job, 1, owner="b1")
    assert states.take_turn(job, 1, owner="b1")  # the same batch delivered again
    assert not states.take_turn(job, 1, owner="b2")
    assert states.take_turn(job, 2, owner="b2")  # a replay is another attempt


def test_a_job_that_could_not_start_leaves_no_trace(states: SchedulerStates) -> None:
    job = state(f"user-{uuid.uuid4().hex}")
    states.enter(job, ACCEPTED)
    states.leave(job)
    assert not states.exists(job.job_id)
    assert states.accepted_at(job.job_id) is None
    assert not states.heads_line(job.request.scope.key, job.job_id)


def test_the_reaper_walk_finds_each_line_head(states: SchedulerStates) -> None:
    jobs = [state(f"user-{uuid.uuid4().hex}") for _ in range(3)]
    for job in jobs:
        states.enter(job, ACCEPTED)
    heads = {job_id for _, job_id in states.line_heads(1000)}
    assert {job.job_id for job in jobs} <= heads


# -- run leases ----------------------------------------------------------------------------------


def new_run(leases: SchedulerLeases) -> str:
    run_id = f"run-{uuid.uuid4().hex}"
    leases.schedule(run_id, "context", ["job-1", "job-2"], "live", expires=None)
    return run_id


def test_one_execution_owns_a_phase_and_a_late_message_does_nothing(
    leases: SchedulerLeases,
) -> None:
    run_id, soon = new_run(leases), NOW + 30
    assert leases.claim(run_id, "context", task_id="t1", token="t1:a", expires=soon) is Claim.OWN
    # a duplicate message of the same phase, another task id: not its run
    assert leases.claim(run_id, "context", task_id="t2", token="t2:a", expires=soon) is Claim.STALE
    # the same message delivered again while its first delivery owned the run: that one died
    redelivered = leases.claim(run_id, "context", task_id="t1", token="t1:b", expires=soon)
    assert redelivered is Claim.REDELIVERED
    assert leases.renew(run_id, "t1:a", soon)
    assert leases.hand_on(run_id, "t1:a", "retrieve", expires=soon)
    assert not leases.renew(run_id, "t1:a", soon)  # handed on: no longer its lease
    late = leases.claim(run_id, "context", task_id="t1", token="t1:c", expires=soon)
    assert late is Claim.STALE  # the run moved on
    assert leases.claim(run_id, "retrieve", task_id="t3", token="t3:a", expires=soon) is Claim.OWN
    assert leases.close(run_id, "t3:a")
    gone = leases.claim(run_id, "retrieve", task_id="t4", token="t4:a", expires=soon)
    assert gone is Claim.STALE  # an ended run is gone for every message


def test_the_reaper_takes_a_run_only_once_its_lease_lapsed(leases: SchedulerLeases) -> None:
    run_id, now = new_run(leases), NOW
    assert leases.claim(run_id, "context", task_id="t1", token="t1:a", expires=now + 1) is Claim.OWN
    assert leases.take(run_id, now) is None  # still alive
    assert run_id in leases.lapsed(now + 2)
    record = leases.take(run_id, now + 2)
    assert record is not None
    assert (record.phase, record.jobs, record.lane, record.owned) == (
        "context",
        ["job-1", "job-2"],
        "live",
        True,
    )
    assert leases.take(run_id, now + 2) is None  # one reaper per run
    assert not leases.exists(run_id)


def test_a_renewed_lease_does_not_lapse(leases: SchedulerLeases) -> None:
    run_id = new_run(leases)
    leases.claim(run_id, "context", task_id="t", token="t:a", expires=NOW + 10)
    assert leases.renew(run_id, "t:a", NOW + 100)
    assert leases.take(run_id, NOW + 50) is None


def test_a_sent_message_must_be_claimed_by_its_pickup_deadline(leases: SchedulerLeases) -> None:
    run_id, now = new_run(leases), NOW
    leases.schedule(run_id, "embed", ["job-1"], "live", expires=now + 1)
    assert run_id in leases.lapsed(now + 2)  # a message that was never sent: the reaper's
    leases.sent(run_id, "embed", now + 60)
    assert run_id not in leases.lapsed(now + 2)  # in the broker now, waiting for a worker
    assert leases.claim(run_id, "embed", task_id="t1", token="t1:a", expires=now + 1) is Claim.OWN
    leases.sent(run_id, "embed", now + 60)  # a late "sent" leaves the owner's lease alone
    assert run_id in leases.lapsed(now + 2)
    record = leases.take(run_id, now + 2)
    assert record is not None and record.owned


def test_a_sent_message_nobody_claims_is_the_reapers_without_a_lost_delivery(
    leases: SchedulerLeases,
) -> None:
    """A worker reserved the message and was killed before starting it: the broker would
    return it only after its visibility timeout; the run lapses at its pickup deadline."""
    run_id, now = new_run(leases), NOW
    leases.schedule(run_id, "persist", ["job-1", "job-2"], "live", expires=now + 1)
    leases.sent(run_id, "persist", now + 60)
    assert run_id not in leases.lapsed(now + 59)
    assert run_id in leases.lapsed(now + 61)
    record = leases.take(run_id, now + 61)
    assert record is not None
    assert (record.phase, record.jobs, record.owned) == ("persist", ["job-1", "job-2"], False)


def test_a_gather_creates_its_run_and_takes_over_from_its_own_earlier_delivery(
    leases: SchedulerLeases,
) -> None:
    batch_id, soon = f"batch-{uuid.uuid4().hex}", NOW + 30
    assert leases.claim(batch_id, "context", task_id=batch_id, token="g:x", expires=soon) is (
        Claim.STALE  # only a gather creates its run
    )
    first = leases.claim(batch_id, GATHERING, task_id=batch_id, token="g:a", expires=soon)
    assert first is Claim.OWN
    again = leases.claim(batch_id, GATHERING, task_id=batch_id, token=f"{batch_id}:b", expires=soon)
    assert again is Claim.STALE  # "g:a" is not a delivery of this task id
    leases.close(batch_id)
    mine = f"{batch_id}:a"
    assert (
        leases.claim(batch_id, GATHERING, task_id=batch_id, token=mine, expires=soon) is Claim.OWN
    )
    retaken = leases.claim(
        batch_id, GATHERING, task_id=batch_id, token=f"{batch_id}:b", expires=soon
    )
    assert retaken is Claim.OWN
    assert not leases.owns(batch_id, mine)
    leases.close(batch_id)


def test_lost_deliveries_are_counted_per_job(leases: SchedulerLeases) -> None:
    job_id = f"job-{uuid.uuid4().hex}"
    assert [leases.delivered(job_id) for _ in range(3)] == [1, 2, 3]


def test_a_waiting_run_can_be_deferred_but_an_owned_one_cannot(leases: SchedulerLeases) -> None:
    """The reaper defers a waiting run while its queue still holds messages (the message is
    most likely there); a run a task owns is the keeper's to renew, never deferred."""
    run_id, now = new_run(leases), NOW
    assert not leases.defer(run_id, now + 120)  # not leased: nothing to defer
    leases.schedule(run_id, "embed", ["job-1"], "backfill", expires=now + 1)
    leases.sent(run_id, "embed", now + 1)
    assert leases.waiting(run_id) == ("embed", "backfill")
    assert leases.defer(run_id, now + 120)
    assert run_id not in leases.lapsed(now + 60)
    assert leases.claim(run_id, "embed", task_id="t1", token="t1:a", expires=now + 1) is Claim.OWN
    assert leases.waiting(run_id) is None
    assert not leases.defer(run_id, now + 500)
    assert run_id in leases.lapsed(now + 2)  # the owner's own lease, untouched
    assert leases.waiting(f"run-{uuid.uuid4().hex}") is None


def test_a_run_closes_for_its_owner_only(leases: SchedulerLeases) -> None:
    run_id = new_run(leases)
    leases.claim(run_id, "context", task_id="t", token="t:a", expires=NOW + 10)
    assert not leases.close(run_id, "t:other")
    assert leases.existing([run_id, "run-none"]) == {run_id}
    assert leases.close(run_id, "t:a")
    assert not leases.exists(run_id)
    assert run_id not in leases.lapsed(NOW + 100)
