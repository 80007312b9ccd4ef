"""Retry policy for transient faults: capped exponential backoff with full jitter, against a
deadline counted from the fault's first failure, not a count of tries.

A task that meets a ``TransientError`` (Elasticsearch or Redis unreachable or busy, an LLM that
cannot be reached) is sent again by Celery's own retry after ``delay_s``: the worker slot is
freed and the message is acknowledged while it waits, so an outage of many minutes holds no
worker and never outlives the broker's visibility timeout or the task's time limit (which an
in-process tenacity loop would). When the fault began is carried in the retried message itself
(the ``fault_since`` keyword), so any worker that takes the retry knows how long it has lasted.
Past ``deadline_s`` the task raises ``DeadlineExceededError``: the job ends ``dead`` with the
last fault as its reason, and can be replayed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

from celery import Task
from celery.utils.time import get_exponential_backoff_interval
from kombu.exceptions import OperationalError

from pipeline.config import WorkerConfig
from pipeline.errors import RetriesExhaustedError, TransientError

FAULT_SINCE = "fault_since"  # the keyword a retried task carries: when its fault began (epoch s)


class DeadlineExceededError(RetriesExhaustedError):
    """A transient fault outlasted the retry deadline: the job ends ``dead``, replayable."""


@dataclass(frozen=True)
class RetryPolicy:
    """Named data: the first backoff, its cap and the deadline, all in seconds."""

    backoff_s: int
    backoff_max_s: int
    deadline_s: int

    @classmethod
    def of(cls, worker: WorkerConfig) -> RetryPolicy:
        return cls(worker.retry_backoff_s, worker.retry_backoff_max_s, worker.retry_deadline_s)

    def delay_s(self, retries: int, retry_after_s: float | None = None) -> float:
        """Seconds before retry ``retries`` (0-based): uniform in [0, min(cap, first * 2**n)],
        never less than a server's own ``Retry-After`` (itself capped)."""
        jittered = get_exponential_backoff_interval(
            self.backoff_s, retries, self.backoff_max_s, full_jitter=True
        )
        asked = min(retry_after_s or 0.0, self.backoff_max_s)
        return max(float(jittered), asked)

    def expired(self, since: float, now: float) -> bool:
        return now - since >= self.deadline_s


def retry_or_give_up(task: Task[Any, Any], exc: TransientError, policy: RetryPolicy) -> NoReturn:
    """Retry ``task`` after a backoff, carrying when its fault began; past the deadline raise
    ``DeadlineExceededError`` instead (the task's ``on_failure`` then records its jobs dead)."""
    now = time.time()
    kwargs = dict(task.request.kwargs or {})
    since = float(kwargs.get(FAULT_SINCE) or now)
    if policy.expired(since, now):
        reason = (
            f"gave up after {now - since:.0f} s of transient faults "
            f"(MEMQ_WORKER_RETRY_DEADLINE_S={policy.deadline_s}); last: {exc.reason}"
        )
        raise DeadlineExceededError(reason) from exc
    kwargs[FAULT_SINCE] = since
    countdown = policy.delay_s(task.request.retries, exc.retry_after_s)
    # max_retries=None here means "the task's own", which its registration sets to None
    raise task.retry(exc=exc, countdown=countdown, kwargs=kwargs)


@contextmanager
def retried(task: Task[Any, Any], policy: RetryPolicy) -> Iterator[None]:
    """Run the task's body; a transient fault in it (or a publish that failed after the
    worker's own publish retries: the broker is away) retries the task against the deadline."""
    try:
        yield
    except OperationalError as exc:
        retry_or_give_up(task, TransientError(f"broker unreachable: {exc}"), policy)
    except TransientError as exc:
        retry_or_give_up(task, exc, policy)
