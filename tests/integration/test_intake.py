"""The session line and intake's recovery paths, on the real Redis and Elasticsearch."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from pipeline.domain.jobs import JobStatus, job_record
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.domain.state import JobState
from workers.app import MemqCelery
from workers.intake import replay

pytestmark = pytest.mark.integration
NOW = datetime.now(UTC)


def state_for(scope: Scope) -> JobState:
    request = AddRequest(
        scope=scope, messages=[MessageIn.model_validate({"role": "user", "content": "x"})]
    )
    return JobState(job_id=f"job-{uuid.uuid4().hex}", request=request, received_at=NOW)


def test_the_line_keeps_order_and_drops_only_heads_whose_state_is_gone(
    celery_app: MemqCelery,
) -> None:
    states = celery_app.runtime.states
    scope = Scope(user_id=f"line-{uuid.uuid4().hex[:8]}")
    first, second, third = state_for(scope), state_for(scope), state_for(scope)
    for job, accepted in (
        (first, NOW - timedelta(days=2)),
        (second, NOW),
        (third, NOW),
    ):
        states.enter(job, accepted)
    # accepted two days ago and still there: its age alone never costs it its place
    assert not states.my_turn(scope.key, second.job_id, NOW)
    states.delete(first.job_id)  # ended without leaving the line (its state is gone)
    assert states.my_turn(scope.key, second.job_id, NOW)
    assert not states.my_turn(scope.key, third.job_id, NOW)
    states.delete(second.job_id)
    assert states.my_turn(scope.key, third.job_id, NOW)


def test_leaving_the_line_names_the_next_job_and_one_chain_takes_each_turn(
    celery_app: MemqCelery,
) -> None:
    states = celery_app.runtime.states
    scope = Scope(user_id=f"turn-{uuid.uuid4().hex[:8]}")
    first, second = state_for(scope), state_for(scope)
    assert states.enter(first, NOW)  # an idle session: starts at once
    assert not states.enter(second, NOW)
    assert not states.enter(second, NOW)  # entered again (an intake finished twice): same place
    assert states.leave_line(scope.key, first.job_id) == second.job_id
    assert states.take_turn(second.job_id, 0, owner="hand-on")
    assert states.take_turn(second.job_id, 0, owner="hand-on")  # the same task, delivered again
    assert not states.take_turn(second.job_id, 0, owner="its-own-wait")
    assert states.take_turn(second.job_id, 1, owner="its-own-wait")  # a replay is a new attempt
    assert states.leave_line(scope.key, second.job_id) is None


def test_a_job_left_queued_without_state_can_be_replayed(celery_app: MemqCelery) -> None:
    runtime = celery_app.runtime
    state = state_for(Scope(user_id=f"lost-{uuid.uuid4().hex[:8]}"))
    runtime.store.save_job(job_record(state, JobStatus.QUEUED, NOW))  # its intake died here
    record = replay(celery_app, state.job_id)
    assert record.status == JobStatus.QUEUED and record.attempts == 1
    assert runtime.states.exists(state.job_id)
    runtime.states.leave_line(state.request.scope.key, state.job_id)
    runtime.states.delete(state.job_id)


def test_a_job_still_running_cannot_be_replayed(celery_app: MemqCelery) -> None:
    from pipeline.errors import InvalidInputError

    runtime = celery_app.runtime
    state = state_for(Scope(user_id=f"busy-{uuid.uuid4().hex[:8]}"))
    runtime.states.save(state)
    runtime.store.save_job(job_record(state, JobStatus.QUEUED, NOW))
    with pytest.raises(InvalidInputError, match="only dead or failed"):
        replay(celery_app, state.job_id)
    runtime.states.delete(state.job_id)
