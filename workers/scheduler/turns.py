"""Whose turn it is: jobs of one session run one at a time, in the order they were accepted.

A job that finds its session idle when accepted is ready at once (``workers.scheduler.batches``). A
job behind others has no task of its own while it waits: when a job ends, it leaves the line and
makes the job now at the head ready (the hand-on). A hand-on lost to a worker killed at the wrong
moment costs a delay, never the job: the reaper's walk of the lines
(``workers.scheduler.reaper.rescue_heads``) makes a head ready that was never started. A job may
thus be made ready twice for one attempt; the first batch to take its turn runs it, the other leaves
it out.
"""

from __future__ import annotations

import logging

from kombu.exceptions import OperationalError

from pipeline.errors import TransientError
from workers.scheduler.batches import make_ready_all
from workers.scheduler.core import Scheduler

log = logging.getLogger("memq.worker")


def hand_on(sched: Scheduler, ended: list[tuple[str, str]]) -> None:
    """Each ``(session key, job id)`` of ``ended`` has ended: leave its session's line and make
    whichever job now heads it ready (one gather per lane for all of them). Best effort; the
    reaper's walk of the lines covers a failed one."""
    following = [job for key, job_id in ended if (job := sched.states.leave_line(key, job_id))]
    if not following:
        return
    try:
        lanes: dict[bool, list[str]] = {}
        for job_id, state in zip(following, sched.states.load_many(following), strict=True):
            # lost: the reaper's walk of the lines takes it out of the line; unrecorded: it
            # starts once its record is written (``workers.intake.record_held``)
            if state is not None and not state.unrecorded:
                lanes.setdefault(state.backfill, []).append(job_id)
        for backfill, job_ids in lanes.items():
            make_ready_all(sched, job_ids, backfill)
    except (TransientError, OperationalError) as exc:
        log.warning("could not start %s, the reaper will: %s", following, exc)
