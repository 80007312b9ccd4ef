"""Whose turn it is: jobs of one session run one at a time, in the order they were accepted.

A job that finds its session idle when accepted is ready at once (``workers.batches``). A job
behind others has no task of its own while it waits: when a job ends, it leaves the line and
makes the job now at the head ready (the hand-on). A hand-on lost to a worker killed at the
wrong moment costs a delay, never the job: the reaper's walk of the lines
(``workers.tasks.rescue_head``) makes a head ready that was never started. A job may thus be
made ready twice for one attempt; the first batch to take its turn runs it, the other leaves it
out.
"""

from __future__ import annotations

import logging

from kombu.exceptions import OperationalError

from pipeline.errors import TransientError
from workers.batches import make_ready
from workers.runtime import MemqCelery

log = logging.getLogger("memq.worker")


def hand_on(app: MemqCelery, session_key: str, job_id: str) -> None:
    """``job_id`` has ended: leave the session's line and make whichever job now heads it
    ready. Best effort; the reaper's walk of the lines covers a failed one."""
    runtime = app.runtime
    following = runtime.states.leave_line(session_key, job_id)
    if following is None:
        return
    try:
        state = runtime.states.load(following)
        if state is None:  # lost; the reaper's walk of the lines takes it out of the line
            return
        make_ready(app, following, state.backfill)
    except (TransientError, OperationalError) as exc:
        log.warning("job %s: could not start %s, the reaper will: %s", job_id, following, exc)
