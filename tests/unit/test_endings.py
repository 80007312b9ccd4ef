"""How a job that cannot go on ends, over the scheduler's memory stores, a memory job store and
reports kept instead of sent: its record says why, its tokens are charged, its state is freed
and its line handed on, and Flower is told; with Elasticsearch down the record is left to a task
and the state kept; with the broker down too nothing is lost; a failed task's run is closed, or
kept leased for the reaper when a record is still to be written. Celery and the real stores are
the integration tests' (``test_pipeline.py``, ``test_failure_report.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from kombu.exceptions import OperationalError

from pipeline.config import QueueConfig
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.errors import PermanentError, TransientError
from pipeline.features.usage import InMemoryUsage
from tests.unit.test_scheduler_flow import World, accepted, make_world
from workers.failures import (
    RECORD_AGAIN_S,
    Endings,
    end_job,
    failure_report_id,
    record_failure,
    release_run,
)
from workers.scheduler.keeper import Held
from workers.scheduler.leases import GATHERING, Claim


@dataclass
class Reported:
    """The reports an ending sent; ``refuse`` plays a broker that is down."""

    later: list[dict[str, Any]] = field(default_factory=list)
    shown: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    refuse: bool = False

    def record_later(self, fields: dict[str, Any], queue: str) -> None:
        if self.refuse:
            raise OperationalError("the broker is down")
        self.later.append(fields)

    def show_failed(self, fields: dict[str, Any], queue: str, task_id: str) -> None:
        if self.refuse:
            raise OperationalError("the broker is down")
        self.shown.append((fields, task_id))


@dataclass
class Counted:
    ended: list[str] = field(default_factory=list)

    def jobs_ended(self, status: str) -> None:
        self.ended.append(status)


@dataclass
class Ends:
    endings: Endings
    world: World
    reports: Reported
    metrics: Counted
    usage: InMemoryUsage


@pytest.fixture
def ends() -> Ends:
    world, reports, metrics, usage = make_world(), Reported(), Counted(), InMemoryUsage()
    endings = Endings(world.sched, usage, metrics, QueueConfig(), reports)
    return Ends(endings, world, reports, metrics, usage)


def test_a_failed_job_is_recorded_charged_counted_freed_and_shown(ends: Ends) -> None:
    first = accepted(ends.world, "alice")
    second = accepted(ends.world, "alice")
    assert record_failure(ends.endings, first.job_id, PermanentError("bad input"))
    record = ends.world.records.get_job(first.job_id)
    assert record is not None and record.status == JobStatus.FAILED
    assert record.reason == "bad input" and record.phase == "context"
    assert ends.metrics.ended == ["failed"]
    assert not ends.world.states.exists(first.job_id)
    assert ends.world.states.ready.get("live") == [second.job_id]  # its line moved on
    ((fields, task_id),) = ends.reports.shown
    assert fields["job_id"] == first.job_id and fields["status"] == "failed"
    assert task_id == failure_report_id(first.job_id, first.attempts)


def test_a_transient_failure_that_outlived_its_retries_ends_dead(ends: Ends) -> None:
    job = accepted(ends.world, "alice")
    record_failure(ends.endings, job.job_id, TransientError("model overloaded"))
    record = ends.world.records.get_job(job.job_id)
    assert record is not None and record.status == JobStatus.DEAD


def test_with_elasticsearch_down_the_record_is_left_to_a_task_and_the_state_kept(
    ends: Ends,
) -> None:
    job = accepted(ends.world, "alice")
    records = ends.world.records

    def down(record: JobRecord) -> None:
        raise TransientError("Elasticsearch unreachable (ConnectionError)")

    records.save_job = down  # type: ignore[method-assign]
    assert record_failure(ends.endings, job.job_id, PermanentError("bad input"))
    assert ends.world.states.exists(job.job_id)  # nothing freed before the record is written
    (later,) = ends.reports.later
    assert later["job_id"] == job.job_id and later["status"] == "failed"
    assert later["attempts"] == job.attempts and later["reason"] == "bad input"
    assert ends.metrics.ended == [] and ends.reports.shown == []


def test_with_the_broker_down_too_the_job_keeps_its_state(ends: Ends) -> None:
    job = accepted(ends.world, "alice")

    def down(record: JobRecord) -> None:
        raise TransientError("Elasticsearch unreachable (ConnectionError)")

    ends.world.records.save_job = down  # type: ignore[method-assign]
    ends.reports.refuse = True
    assert not record_failure(ends.endings, job.job_id, PermanentError("bad input"))
    assert ends.world.states.exists(job.job_id)


def test_a_failure_report_the_broker_refuses_costs_only_the_report(ends: Ends) -> None:
    job = accepted(ends.world, "alice")
    ends.reports.refuse = True
    assert record_failure(ends.endings, job.job_id, PermanentError("bad input"))
    record = ends.world.records.get_job(job.job_id)
    assert record is not None and record.status == JobStatus.FAILED
    assert not ends.world.states.exists(job.job_id)


def test_a_job_replayed_meanwhile_is_left_to_its_new_run(ends: Ends) -> None:
    job = accepted(ends.world, "alice")
    ends.world.states.save(job.with_(attempts=job.attempts + 1))  # replayed meanwhile
    end_job(ends.endings, job, JobStatus.FAILED, "extract", "bad input")
    assert ends.world.states.exists(job.job_id)


def test_a_failed_tasks_run_is_closed_or_kept_for_the_reaper(ends: Ends) -> None:
    leases, sched = ends.world.leases, ends.world.sched
    for run, unfinished in (("r1", False), ("r2", True)):
        token = f"{run}:t"
        claim = leases.claim(run, GATHERING, task_id=run, token=token, expires=sched.expiry())
        assert claim is Claim.OWN
        release_run(sched, Held(run, token, GATHERING), unfinished=unfinished)
    assert not leases.exists("r1")
    assert leases.exists("r2") and not leases.owns("r2", "r2:t")
    assert leases.lapsed(sched.expiry() + RECORD_AGAIN_S - 1) == []
    assert leases.lapsed(sched.expiry() + RECORD_AGAIN_S + 1) == ["r2"]
    release_run(sched, None, unfinished=True)  # a task that held no run: nothing to do
