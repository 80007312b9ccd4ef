"""Whose turn it is: jobs of one session run one at a time, in the order they were accepted.

A job that finds its session idle when accepted is ready at once (``workers.batches``). A job
behind others gets a ``wait_turn`` task, and it does not poll at a steady rate: when a job
ends, it leaves the line and makes the job now at the head ready (the hand-on). The waiting
task still checks back, with a growing delay, so a hand-on lost to a worker killed at the wrong
moment costs a delay (a minute at most), never the job. A job may thus be made ready twice for
one attempt; the first batch to take its turn runs it, the other leaves it out.
"""

from __future__ import annotations

import logging

from kombu.exceptions import OperationalError

from pipeline.errors import TransientError
from workers.batches import make_ready
from workers.runtime import MemqCelery

log = logging.getLogger("memq.worker")

FIRST_CHECK_S = 5.0
LAST_CHECK_S = 60.0


def check_delay(checks: int) -> float:
    """Seconds until a waiting job looks at the line again: 5 s, then doubling up to a minute.
    The hand-on is what starts a waiting job; these checks only catch a lost one, so they are
    rare rather than quick (a burst of jobs for one session would otherwise poll together)."""
    return min(LAST_CHECK_S, FIRST_CHECK_S * 2.0**checks)


def hand_on(app: MemqCelery, session_key: str, job_id: str) -> None:
    """``job_id`` has ended: leave the session's line and make whichever job now heads it
    ready. Best effort; the waiting job's own checks cover a failed one."""
    runtime = app.runtime
    following = runtime.states.leave_line(session_key, job_id)
    if following is None:
        return
    try:
        state = runtime.states.load(following)
        if state is None:  # lost; the next waiting job's check takes it out of the line
            return
        make_ready(app, following, state.backfill)
    except (TransientError, OperationalError) as exc:
        log.warning("job %s: could not start %s, its own check will: %s", job_id, following, exc)
