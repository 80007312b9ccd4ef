"""A reprocess run on a worker (``POST /v1/admin/reprocess``): ``start_reprocess`` takes the
reprocess lock and sends ``memq.reprocess``; the task holds the lock while
``pipeline.features.reprocess.run_reprocess`` does the work, and lets it go at the end.

Glossary:
- **the lock**: ``memq:{ns}:reprocess`` in Redis (``RedisStateStore.take_lock``), its value
  the run's task id. Held from the request (``PICKUP_S``: the message may wait behind
  backfill traffic) and, once the task runs, renewed every ``LOCK_TTL_S / 3`` by a thread of
  the task's process for ``LOCK_TTL_S``: a worker killed mid-run lets it lapse within
  ``LOCK_TTL_S``, and the status says no run is active (and a new run may start: the
  resumed one). One run at a time: two would race on
  the same builds and the alias swap.
- **the queue**: the backfill queue. The run embeds every memory and entity again: hours of
  CPU on a large store. The backfill lane is the one that may wait, and its worker role
  (``cpu``, prefork) runs model work in processes, where a hard time limit can end a run. The
  run holds one process of that pool for its whole length; the others keep serving the live
  ``cpu`` phases, and the ``io`` worker (extraction, persist) is untouched. ``--rate`` bounds
  the CPU it takes beside them.

Why ``acks_late=False``: the message is acknowledged when the task starts. On the Redis
broker an unacknowledged message is delivered again once the visibility timeout
(``MEMQ_WORKER_VISIBILITY_TIMEOUT_S``, 15 minutes) passes, so a late ack would hand a run of
hours to a second worker while the first still runs it. Early ack costs the redelivery of a
run whose worker died: nothing restarts it by itself. What it leaves is safe: the build
stays (a new ``POST`` with the same embedder resumes it: the build is its own checkpoint),
the lock lapses, and the progress in the build keeps the ``updated_at`` of its last write.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from celery import Task
from celery.exceptions import Ignore
from kombu.exceptions import OperationalError

from pipeline.config import QueueConfig
from pipeline.errors import ConflictError, TransientError
from pipeline.features.reprocess import ReprocessRun, run_reprocess
from pipeline.store.reprocess import Reembedded
from workers.names import REPROCESS_TASK
from workers.queues import TaskSender
from workers.runtime import MemqCelery
from workers.scheduler.state_store import RedisStateStore

log = logging.getLogger("memq.worker")

REPROCESS_LOCK = "reprocess"
LOCK_TTL_S = 15.0
PICKUP_S = 900.0
# the worker's task limits are minutes (a phase); a re-embedding of a large store takes hours
REPROCESS_TIME_LIMIT_S = 7 * 86_400
REPROCESS_SOFT_LIMIT_S = REPROCESS_TIME_LIMIT_S - 60


def start_reprocess(
    sender: TaskSender, states: RedisStateStore, queues: QueueConfig, run: ReprocessRun
) -> str:
    """Take the lock and send the run to a worker; its id. ``ConflictError`` while another
    run holds the lock; ``TransientError`` when Redis or the broker cannot take it."""
    run_id = uuid.uuid4().hex
    if not states.take_lock(REPROCESS_LOCK, run_id, PICKUP_S):
        raise ConflictError(
            "a reprocess is running already: GET /v1/admin/reprocess shows its progress"
        )
    try:
        sender.send_task(
            REPROCESS_TASK, kwargs={"run": run.message()}, task_id=run_id, queue=queues.backfill
        )
    except OperationalError as exc:
        states.end_lock(REPROCESS_LOCK, run_id)
        raise TransientError(f"could not send the reprocess to the workers: {exc}") from exc
    return run_id


def active_reprocess(states: RedisStateStore) -> str | None:
    """The id of the run that holds the lock now; None when none does."""
    return states.lock_owner(REPROCESS_LOCK)


def take_run(states: RedisStateStore, owner: str) -> None:
    """The lock held by ``owner`` for ``LOCK_TTL_S`` (kept if it holds it, taken if free);
    ``ConflictError`` when another run holds it."""
    mine = states.renew_lock(REPROCESS_LOCK, owner, LOCK_TTL_S)
    if not mine and not states.take_lock(REPROCESS_LOCK, owner, LOCK_TTL_S):
        holder = states.lock_owner(REPROCESS_LOCK)
        raise ConflictError(f"a reprocess is running already (run {holder})")


@contextmanager
def holding(states: RedisStateStore, owner: str) -> Iterator[None]:
    """The lock taken (``take_run``), renewed while the body runs by a thread of this process
    (so it dies with it), and let go after it. The task holds it so, and so does ``memq
    reprocess``: one run at a time, whoever started it."""
    take_run(states, owner)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(LOCK_TTL_S / 3):
            try:
                if not states.renew_lock(REPROCESS_LOCK, owner, LOCK_TTL_S):
                    log.error("reprocess %s lost its lock", owner)
            except TransientError as exc:  # Redis away: try again next round
                log.warning("reprocess %s could not renew its lock: %s", owner, exc.reason)

    thread = threading.Thread(target=renew, name=f"reprocess-lock-{owner}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        with suppress(TransientError):  # Redis away: the lock lapses with its TTL instead
            states.end_lock(REPROCESS_LOCK, owner)


def register_reprocess_tasks(app: MemqCelery) -> None:
    """``memq.reprocess`` (see the module's docstring for its queue and acknowledgement)."""
    runtime = app.runtime

    @app.task(
        name=REPROCESS_TASK,
        bind=True,
        acks_late=False,
        max_retries=0,
        time_limit=REPROCESS_TIME_LIMIT_S,
        soft_time_limit=REPROCESS_SOFT_LIMIT_S,
        shared=False,
    )
    def reprocess(self: Task, run: dict[str, Any]) -> dict[str, Any]:  # type: ignore[type-arg]
        """Run ``run`` under the lock; what it did. A failure is recorded in the builds'
        progress and fails the task: an admin starts it again, and it resumes."""
        owner = str(self.request.id)
        try:
            take_run(runtime.states, owner)
        except ConflictError as exc:
            log.warning("reprocess %s not run: %s", owner, exc.reason)
            raise Ignore() from exc
        with holding(runtime.states, owner):
            done = run_reprocess(
                runtime.settings,
                ReprocessRun.from_message(run),
                progress=lambda line: log.info("reprocess %s: %s", owner, line),
            )
        counts = (
            {"embedded": sum(s.embedded for s in done.synced.values())}
            if isinstance(done, Reembedded)
            else {"jobs": done.jobs, "memories": done.memories, "carried_over": done.carried}
        )
        return {
            "targets": [str(t) for t in done.targets.values()],
            "dropped": done.dropped,
        } | counts
