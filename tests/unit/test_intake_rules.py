"""The intake's rules over the scheduler's memory stores and a memory job store: a job accepted
once however often it is posted, held in Redis while Elasticsearch is down and recorded once it
is back, parked in Elasticsearch while Redis is down and drained into its line in order, an
intake that died half-way finished, a failed job replayed. The same paths against the real
stores, the broker and their outages are the integration tests' (``test_intake.py``,
``test_intake_outages.py``, ``test_es_outage.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import pytest

from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord, JobStatus, job_record
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.domain.state import JobState
from pipeline.errors import InvalidInputError, TransientError
from pipeline.features.usage import InMemoryUsage
from pipeline.store.memory import InMemoryStore
from tests.unit.test_scheduler_flow import NOW, World, make_world
from workers.intake import (
    IntakeParts,
    JobRecords,
    accept,
    drain_parked,
    finish_intakes,
    held,
    record_held,
    replay_job,
    state_of,
)
from workers.runtime import Parking
from workers.scheduler.state_store import Lane


@dataclass
class Outage:
    """A job store whose Elasticsearch can be taken down: every call raises the store's
    ``TransientError`` while ``down``, as ``ElasticStore`` does when the node is unreachable."""

    store: InMemoryStore
    down: bool = False

    def _check(self) -> None:
        if self.down:
            raise TransientError("Elasticsearch unreachable (ConnectionError)")

    def create_job(self, record: JobRecord) -> JobRecord | None:
        self._check()
        return self.store.create_job(record)

    def save_job(self, record: JobRecord) -> None:
        self._check()
        self.store.save_job(record)

    def get_job(self, job_id: str) -> JobRecord | None:
        self._check()
        return self.store.get_job(job_id)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord | None]:
        self._check()
        return self.store.get_jobs(job_ids)

    def parked_jobs(self, limit: int, fresh: bool = False) -> list[JobRecord]:
        self._check()
        return self.store.parked_jobs(limit, fresh)

    def unpark_jobs(self, job_ids: Sequence[str]) -> None:
        self._check()
        self.store.unpark_jobs(job_ids)


@dataclass
class Desk:
    """An intake over the world's memory stores, with the handles a test pulls."""

    intake: IntakeParts
    world: World
    es: Outage

    @property
    def records(self) -> InMemoryStore:
        return self.es.store

    def ready(self) -> list[str]:
        return list(self.world.states.ready.get(Lane.LIVE, []))


def intake_over(
    world: World, records: JobRecords, clock: Callable[[], datetime] = lambda: NOW
) -> IntakeParts:
    """An intake over the world's scheduler and memory stores, its records in ``records``."""
    return IntakeParts(
        states=world.states,
        records=lambda: records,
        parking=Parking(),
        settings=Settings(),
        usage=InMemoryUsage(),
        scheduler=world.sched,
        clock=clock,
    )


@pytest.fixture
def desk() -> Desk:
    world = make_world()
    es = Outage(world.records)
    return Desk(intake_over(world, es), world, es)


def recorded_state(request: AddRequest) -> JobState:
    """The state of a job of ``request`` as its record would rebuild it."""
    return JobState(job_id=request.job_id(), request=request, received_at=NOW)


def said(text: str, user: str = "alice") -> AddRequest:
    return AddRequest(
        messages=[MessageIn(role="user", content=text)], scope=Scope(user_id=user), infer=False
    )


def test_a_job_is_recorded_queued_joins_its_line_and_heads_it_ready(desk: Desk) -> None:
    accepted = accept(desk.intake, said("I like tea"))
    assert accepted.created
    job = accepted.record.job_id
    record = desk.records.get_job(job)
    assert record is not None and record.status == JobStatus.QUEUED and not record.parked
    assert desk.world.states.exists(job)
    assert desk.ready() == [job]
    assert desk.world.states.intakes == {}  # the intake is done


def test_the_same_conversation_posted_twice_is_one_job(desk: Desk) -> None:
    first = accept(desk.intake, said("I like tea"))
    again = accept(desk.intake, said("I like tea"))
    assert not again.created and again.record.job_id == first.record.job_id
    assert desk.ready() == [first.record.job_id]


def test_an_idempotency_key_names_the_job_whatever_the_conversation(desk: Desk) -> None:
    first = accept(desk.intake, said("I like tea"), idempotency_key="k1")
    other = accept(desk.intake, said("I like coffee"), idempotency_key="k1")
    assert other.record.job_id == first.record.job_id and not other.created


def test_a_job_behind_another_of_its_session_waits_for_its_turn(desk: Desk) -> None:
    first = accept(desk.intake, said("I like tea"))
    second = accept(desk.intake, said("I moved to Berlin"))
    assert desk.ready() == [first.record.job_id]
    assert desk.world.states.lines[Scope(user_id="alice").key] == [
        first.record.job_id,
        second.record.job_id,
    ]


def test_with_elasticsearch_down_a_job_is_held_in_redis_then_recorded_and_started(
    desk: Desk,
) -> None:
    desk.es.down = True
    accepted = accept(desk.intake, said("I like tea"))
    job = accepted.record.job_id
    assert accepted.created and desk.ready() == []  # nothing starts it before its record
    assert held(desk.intake, job) is not None  # the caller can follow it meanwhile
    assert desk.world.states.unrecorded(10) == [job]
    with pytest.raises(TransientError):
        record_held(desk.intake)  # still down: it stays held
    desk.es.down = False
    record_held(desk.intake)
    record = desk.records.get_job(job)
    assert record is not None and record.status == JobStatus.QUEUED
    assert desk.world.states.unrecorded(10) == [] and desk.ready() == [job]
    assert held(desk.intake, job) is None


def test_a_held_job_known_as_ended_leaves_its_line_instead_of_running_twice(
    desk: Desk,
) -> None:
    done = accept(desk.intake, said("I like tea"))
    job = done.record.job_id
    finished = job_record(state_of(done.record), JobStatus.SUCCEEDED, NOW)
    desk.records.save_job(finished)
    desk.world.states.leave(state_of(done.record))
    desk.world.states.ready.clear()
    desk.es.down = True
    again = accept(desk.intake, said("I like tea"))  # posted again during the outage
    assert again.record.job_id == job
    desk.es.down = False
    record_held(desk.intake)
    assert not desk.world.states.exists(job) and desk.ready() == []
    stored = desk.records.get_job(job)
    assert stored is not None and stored.status == JobStatus.SUCCEEDED


def test_with_redis_down_a_job_is_parked_then_drained_into_its_line_in_order(
    desk: Desk,
) -> None:
    states = desk.world.states
    real_begun = states.intake_begun

    def refused(job_id: str, now: object) -> bool:
        raise TransientError("Redis unreachable (ConnectionError)")

    states.intake_begun = refused  # type: ignore[method-assign]
    first = accept(desk.intake, said("I like tea"))
    states.intake_begun = real_begun  # type: ignore[method-assign]
    assert first.created and first.record.parked and desk.intake.parking.pending
    # the next intake drains the parked jobs into their lines first (acceptance order)
    second = accept(desk.intake, said("I moved to Berlin"))
    assert not second.record.parked  # the drain ran first: Redis answers again
    line = states.lines[Scope(user_id="alice").key]
    assert line == [first.record.job_id, second.record.job_id]
    assert not desk.intake.parking.pending
    assert desk.records.parked_jobs(10) == []


def test_a_drain_with_elasticsearch_down_leaves_the_parked_jobs_for_later(desk: Desk) -> None:
    parked = job_record(recorded_state(said("I like tea")), JobStatus.QUEUED, NOW)
    desk.records.save_job(parked.model_copy(update={"parked": True}))
    desk.es.down = True
    assert drain_parked(desk.intake) is False  # never raises
    desk.es.down = False
    assert drain_parked(desk.intake) is True
    assert desk.ready() == [parked.job_id]


def test_only_one_process_drains_at_a_time(desk: Desk) -> None:
    assert desk.world.states.take_drain("another", 30.0)
    parked = job_record(recorded_state(said("I like tea")), JobStatus.QUEUED, NOW)
    desk.records.save_job(parked.model_copy(update={"parked": True}))
    assert drain_parked(desk.intake) is False
    assert desk.ready() == []


def test_an_intake_that_died_after_the_record_is_started_by_the_sweep(desk: Desk) -> None:
    state = recorded_state(said("I like tea"))
    desk.records.save_job(job_record(state, JobStatus.QUEUED, NOW))
    desk.world.states.intake_begun(state.job_id, NOW)  # then the process died
    finish_intakes(desk.intake, NOW.timestamp() + 1)
    assert desk.ready() == [state.job_id] and desk.world.states.intakes == {}


def test_an_intake_that_died_before_the_record_is_only_forgotten(desk: Desk) -> None:
    desk.world.states.intake_begun("never-recorded", NOW)
    finish_intakes(desk.intake, NOW.timestamp() + 1)
    assert desk.ready() == [] and desk.world.states.intakes == {}


def test_a_failed_job_replays_from_its_request_as_its_next_attempt(desk: Desk) -> None:
    state = recorded_state(said("I like tea"))
    desk.records.save_job(job_record(state, JobStatus.FAILED, NOW, reason="bad input"))
    queued = replay_job(desk.intake, state.job_id)
    assert queued.status == JobStatus.QUEUED and queued.attempts == state.attempts + 1
    assert desk.ready() == [state.job_id]


def test_a_running_or_unknown_job_does_not_replay(desk: Desk) -> None:
    running = accept(desk.intake, said("I like tea"))
    with pytest.raises(InvalidInputError, match="only dead or failed"):
        replay_job(desk.intake, running.record.job_id)
    with pytest.raises(InvalidInputError, match="no job"):
        replay_job(desk.intake, "nope")
