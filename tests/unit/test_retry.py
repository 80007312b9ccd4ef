"""The retry policy for transient faults: capped, jittered backoff against a deadline."""

from __future__ import annotations

import time

import pytest
from celery import Celery

from pipeline.config import WorkerConfig
from pipeline.errors import TransientError
from workers.retry import FAULT_SINCE, DeadlineExceededError, RetryPolicy, retry_or_give_up

POLICY = RetryPolicy(backoff_s=2, backoff_max_s=60, deadline_s=900)


def test_the_policy_is_read_from_the_worker_settings() -> None:
    config = WorkerConfig(retry_backoff_s=3, retry_backoff_max_s=30, retry_deadline_s=120)
    assert RetryPolicy.of(config) == RetryPolicy(3, 30, 120)
    assert RetryPolicy.of(WorkerConfig()) == POLICY  # the defaults: 2 s, capped at 60 s, 15 min


@pytest.mark.parametrize("retries", [0, 1, 3, 5, 10, 40])
def test_the_backoff_is_full_jitter_under_the_cap(retries: int) -> None:
    ceiling = min(60, 2 * 2**retries)
    delays = [POLICY.delay_s(retries) for _ in range(200)]
    assert all(0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling / 2  # spread over the range, not pinned to its floor


def test_a_servers_retry_after_is_honoured_up_to_the_cap() -> None:
    assert POLICY.delay_s(0, retry_after_s=20) >= 20
    assert POLICY.delay_s(0, retry_after_s=3600) <= 60


def test_the_deadline_counts_from_the_first_failure() -> None:
    assert not POLICY.expired(since=1000.0, now=1899.0)
    assert POLICY.expired(since=1000.0, now=1900.0)


def test_past_the_deadline_the_task_gives_up_with_a_readable_reason() -> None:
    app = Celery("retry-test", set_as_current=False)

    @app.task(bind=True, shared=False, max_retries=None)
    def phase(self: object) -> None: ...

    began = time.time() - 901
    phase.push_request(kwargs={FAULT_SINCE: began}, retries=30)
    try:
        with pytest.raises(DeadlineExceededError) as caught:
            retry_or_give_up(phase, TransientError("search: Elasticsearch unreachable"), POLICY)
    finally:
        phase.pop_request()
    assert "gave up after 901 s" in caught.value.reason
    assert "Elasticsearch unreachable" in caught.value.reason
