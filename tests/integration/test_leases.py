"""Run ownership on the real Redis (``workers.scheduler.leases``): one owner per phase of a
run, what a late or duplicate message learns, and what the reaper may take."""

from __future__ import annotations

import time
import uuid

import pytest

from workers.app import MemqCelery
from workers.scheduler.leases import GATHERING, Claim, RunLeases

pytestmark = pytest.mark.integration


@pytest.fixture
def leases(celery_app: MemqCelery) -> RunLeases:
    return celery_app.runtime.leases


def new_run(leases: RunLeases) -> str:
    run_id = f"run-{uuid.uuid4().hex}"
    leases.schedule(run_id, "context", ["job-1", "job-2"], "live", expires=None)
    return run_id


def test_one_execution_owns_a_phase_and_a_late_message_does_nothing(leases: RunLeases) -> None:
    run_id, soon = new_run(leases), time.time() + 30
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


def test_the_reaper_takes_a_run_only_once_its_lease_lapsed(leases: RunLeases) -> None:
    run_id, now = new_run(leases), time.time()
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


def test_a_sent_message_must_be_claimed_by_its_pickup_deadline(leases: RunLeases) -> None:
    run_id, now = new_run(leases), time.time()
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
    leases: RunLeases,
) -> None:
    """A worker reserved the message and was killed before starting it: the broker would
    return it only after its visibility timeout; the run lapses at its pickup deadline."""
    run_id, now = new_run(leases), time.time()
    leases.schedule(run_id, "persist", ["job-1", "job-2"], "live", expires=now + 1)
    leases.sent(run_id, "persist", now + 60)
    assert run_id not in leases.lapsed(now + 59)
    assert run_id in leases.lapsed(now + 61)
    record = leases.take(run_id, now + 61)
    assert record is not None
    assert (record.phase, record.jobs, record.owned) == ("persist", ["job-1", "job-2"], False)


def test_a_gather_creates_its_run_and_takes_over_from_its_own_earlier_delivery(
    leases: RunLeases,
) -> None:
    batch_id, soon = f"batch-{uuid.uuid4().hex}", time.time() + 30
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


def test_lost_deliveries_are_counted_per_job(leases: RunLeases) -> None:
    job_id = f"job-{uuid.uuid4().hex}"
    assert [leases.delivered(job_id) for _ in range(3)] == [1, 2, 3]
    leases.client.delete(f"{leases.prefix}:job:{job_id}:deliveries")


def test_a_waiting_run_can_be_deferred_but_an_owned_one_cannot(leases: RunLeases) -> None:
    """The reaper defers a waiting run while its queue still holds messages (the message is
    most likely there); a run a task owns is the keeper's to renew, never deferred."""
    run_id, now = new_run(leases), time.time()
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
