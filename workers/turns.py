"""Whose turn it is: jobs of one session run one at a time, in the order they were accepted.

A job that finds its session idle when accepted starts at once, at its first phase. A job
behind others starts with ``wait_turn``, and it does not poll at a steady rate: when a job
ends, it leaves the line and starts a fresh chain for the job now at the head (the hand-on),
which finds itself first and goes on at once. The waiting task still checks back, with a
growing delay, so a hand-on lost to a worker killed at the wrong moment costs a delay (a minute
at most), never the job. Two chains may thus reach the head for one attempt of a job; the first
to take the turn runs it, the other ends quietly.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kombu.exceptions import OperationalError

from pipeline.errors import TransientError
from workers.chain import job_chain

if TYPE_CHECKING:
    from workers.app import MemqCelery

log = logging.getLogger("memq.worker")

FIRST_CHECK_S = 5.0
LAST_CHECK_S = 60.0


def check_delay(checks: int) -> float:
    """Seconds until a waiting job looks at the line again: 5 s, then doubling up to a minute.
    The hand-on is what starts a waiting job; these checks only catch a lost one, so they are
    rare rather than quick (a burst of jobs for one session would otherwise poll together)."""
    return min(LAST_CHECK_S, FIRST_CHECK_S * 2.0**checks)


def hand_on(app: MemqCelery, session_key: str, job_id: str) -> None:
    """``job_id`` has ended: leave the session's line and start whichever job now heads it.
    The start is best effort; the waiting job's own checks cover a failed one."""
    runtime = app.runtime
    following = runtime.states.leave_line(session_key, job_id)
    if following is None:
        return
    try:
        state = runtime.states.load(following)
        if state is None:  # lost; the next waiting job's check takes it out of the line
            return
        job_chain(app, following, runtime.settings.queues, state.backfill).apply_async()
    except (TransientError, OperationalError) as exc:
        log.warning("job %s: could not start %s, its own check will: %s", job_id, following, exc)
