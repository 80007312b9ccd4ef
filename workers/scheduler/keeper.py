"""The lease keeper: one daemon thread per worker process that renews the leases of the runs
its tasks own, gives up a lease whose task overran its time limit, and, in one process at a
time (a Redis lock), runs the reaper.

It is a thread of the process that runs the tasks, so it dies with it: a SIGKILLed worker (or
prefork child) stops renewing, and its leases lapse within ``lease_s``. It is also the time
limit of the threads pool, which ignores Celery's ``task_time_limit``: a Python thread cannot be
stopped from outside, so an overrunning call is abandoned instead. Its lease is let go, the
reaper sends the batch's jobs on elsewhere, and whatever the abandoned call returns later is
dropped, since it no longer owns the run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.config import WorkerConfig
from pipeline.errors import TransientError
from workers.scheduler.protocols import SchedulerLeases

log = logging.getLogger("memq.worker")


@dataclass(frozen=True)
class Held:
    """A run a task of this process owns: which run, under which execution token, since when."""

    run_id: str
    token: str
    phase: str
    since: float = field(default_factory=time.monotonic)


class Keeper:
    """Renews this process's leases; runs ``reap`` every ``reaper_interval_s`` when it holds
    the reaper's turn."""

    def __init__(
        self,
        leases: Callable[[], SchedulerLeases],
        config: WorkerConfig,
        reap: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._leases = leases
        self.config = config
        self.reap = reap
        self.clock = clock
        self._held: dict[str, Held] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def start(self) -> None:
        """Start the thread (once per process: a forked child starts its own)."""
        import os

        with self._lock:
            if self._thread is not None and self._pid == os.getpid():
                return
            self._held.clear()  # a fork's copy of the parent's holds is not ours
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._loop, name="memq-keeper", daemon=True)
            self._thread.start()

    def expiry(self) -> float:
        return self.clock() + self.config.lease_s

    def pickup_by(self) -> float:
        """How long a run's sent message may wait for a worker before the reaper sends again."""
        return self.clock() + self.config.pickup_s

    def hold(self, task_id: str, held: Held) -> None:
        self.start()
        with self._lock:
            self._held[task_id] = held

    def release(self, task_id: str) -> Held | None:
        with self._lock:
            return self._held.pop(task_id, None)

    def _loop(self) -> None:
        tick = self.config.lease_s / 3
        next_reap = time.monotonic()
        while True:
            time.sleep(min(tick, self.config.reaper_interval_s))
            self._guarded(self.renew_all)
            if time.monotonic() >= next_reap:
                next_reap = time.monotonic() + self.config.reaper_interval_s
                self._guarded(self._maybe_reap)

    def _guarded(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception:  # a Redis blip: the next tick tries again
            log.exception("lease keeper: %s failed", step.__name__)

    def renew_all(self) -> None:
        """Renew every lease still held, except those of tasks over their time limit."""
        with self._lock:
            held = list(self._held.items())
        limit = self.config.task_time_limit_s
        for task_id, run in held:
            if time.monotonic() - run.since > limit:
                log.error(
                    "task %s (%s of run %s) overran its %d s time limit: lease given up",
                    task_id,
                    run.phase,
                    run.run_id,
                    limit,
                )
                self.release(task_id)
            elif not self._leases().renew(run.run_id, run.token, self.expiry()):
                self.release(task_id)

    def _maybe_reap(self) -> None:
        if self._leases().first_to_reap(self.config.reaper_interval_s):
            self.reap()


def give_up_for_retry(
    keeper: Keeper, leases: SchedulerLeases, task_id: str, held_back_s: float
) -> bool:
    """The task ``task_id`` is about to send its retry, held back in some worker's memory:
    its run stays leased, ownerless, ``held_back_s`` past a lease's expiry, so a worker lost
    with the message costs a lapse, no more. False when Redis is away: the run then stays
    owned by this execution, which nobody renews (``lapses``), and the task must end without
    a retry, acknowledged; the reaper sends its jobs on once Redis is back. (A retry sent
    then would wait for the broker inside the task, past its time limit.)"""
    held = keeper.release(task_id)
    if held is None:
        return True
    try:
        leases.hand_on(held.run_id, held.token, held.phase, expires=keeper.expiry() + held_back_s)
    except TransientError as exc:
        lapses(held, "give up its run for a retry", exc)
        return False
    return True


def sent_on(
    keeper: Keeper,
    leases: SchedulerLeases,
    task_id: str,
    following: Callable[[str], str | None],
) -> None:
    """The task ``task_id`` ended and Celery has sent its run's next message, for the phase
    ``following(phase)`` (None: none follows): the run waits for a worker to claim it until
    the pickup deadline, and needs no lease meanwhile. With Redis away the run stays owned
    (``lapses``)."""
    held = keeper.release(task_id)
    phase = None if held is None else following(held.phase)
    if held is None or phase is None:
        return
    try:
        leases.sent(held.run_id, phase, keeper.pickup_by())
    except TransientError as exc:
        lapses(held, "mark its next message sent", exc)


def lapses(held: Held, what: str, exc: TransientError) -> None:
    """A task could not ``what`` for its run (Redis away): nothing renews the run's lease any
    more, so it lapses within ``lease_s`` and the reaper sends its jobs on from the phase the
    run is at (or the task's own next delivery finds it and does the same)."""
    log.warning(
        "run %s: cannot %s in %s, so its lease lapses and the reaper recovers it: %s",
        held.run_id,
        what,
        held.phase,
        exc.reason,
    )
