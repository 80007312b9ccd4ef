"""The scheduler as one object: what its functions need, built once per app.

``Scheduler`` holds the scheduler's state (``SchedulerStates``, ``SchedulerLeases``), the
process's keeper (whose clock dates the leases), the worker settings, the clock, the job
records (built on first use: Elasticsearch may be down while jobs are made ready) and a
``Sender``: the messages the scheduler sends, as Celery sends them (``CelerySender``). The
functions of ``batches``, ``turns`` and ``waves`` take it instead of the Celery app, so they can
run over the memory stores and a recording sender in unit tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import redis
from celery import Celery

from pipeline.adapters.redis_errors import redis_errors
from pipeline.config import QueueConfig, WorkerConfig
from pipeline.domain.state import Phase
from pipeline.ingestion.phases import Workload
from pipeline.store.protocol import Store
from workers.chain import batch_chain
from workers.names import GATHER_TASK, PREPARE_TASK
from workers.queues import queue_for
from workers.scheduler.keeper import Keeper
from workers.scheduler.protocols import SchedulerLeases, SchedulerStates
from workers.scheduler.state_store import Lane


class Sender(Protocol):
    """The messages the scheduler sends. Each raises kombu's ``OperationalError`` when the
    broker refuses it."""

    def gather(
        self, lane: Lane, *, countdown: float | None = None, task_id: str | None = None
    ) -> None:
        """A gather for ``lane`` (``task_id``: the batch id of a gather sent again)."""
        ...

    def prepare(self, job_ids: list[str]) -> None:
        """Embed ahead the new turns of these jobs (``memq.batch.prepare``)."""
        ...

    def queued(self, workload: Workload, lane: Lane) -> int:
        """How many messages wait in the queue of ``workload``'s tasks of ``lane``."""
        ...

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
        """The chain of phase tasks of the run ``run_id``, from ``start``."""
        ...


class CelerySender:
    """``Sender`` over a Celery app: each message on its queue (``workers.queues``)."""

    def __init__(self, app: Celery, queues: QueueConfig, broker: redis.Redis) -> None:
        self.app = app
        self.queues = queues
        self.broker = broker  # the broker's Redis: a queue is a list there

    def gather(
        self, lane: Lane, *, countdown: float | None = None, task_id: str | None = None
    ) -> None:
        queue = queue_for(Workload.IO, self.queues, lane == Lane.BACKFILL)
        self.app.send_task(
            GATHER_TASK, args=(lane.value,), queue=queue, countdown=countdown, task_id=task_id
        )

    def prepare(self, job_ids: list[str]) -> None:
        queue = queue_for(Workload.CPU, self.queues, backfill=False)
        self.app.send_task(PREPARE_TASK, args=(job_ids,), queue=queue)

    def queued(self, workload: Workload, lane: Lane) -> int:
        queue = queue_for(workload, self.queues, lane == Lane.BACKFILL)
        with redis_errors("read a queue's depth"):
            return int(self.broker.llen(queue))

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
        chain = batch_chain(
            self.app,
            run_id,
            job_ids,
            self.queues,
            backfill=backfill,
            start=start,
            fault_since=fault_since,
        )
        if countdown is None:
            chain.apply_async()
        else:
            chain.apply_async(countdown=countdown)


@dataclass(frozen=True)
class Scheduler:
    """What the scheduling functions need (see the module docstring)."""

    states: SchedulerStates
    leases: SchedulerLeases
    keeper: Keeper
    worker: WorkerConfig
    sender: Sender
    clock: Callable[[], datetime]
    records: Callable[[], Store]
    # ends a job that cannot go on, its record saying why (``workers.failures.record_failure``);
    # False when even that could not be scheduled (the broker is gone too)
    fail_job: Callable[[str, BaseException], bool]

    def expiry(self) -> float:
        """When a lease taken now lapses."""
        return self.keeper.expiry()

    def pickup_by(self) -> float:
        """Until when a message sent now may wait for a worker."""
        return self.keeper.pickup_by()
