"""Job state between tasks, the per-session turnstile, and the ready lists, all in Redis.

Broker messages carry only ids; the state of a job (its request and each phase's output)
lives under ``memq:{namespace}:job:{id}:state`` until the job ends, and a batch's task reads
and writes the states of all its jobs in one round trip. The turnstile is a Redis list per
session: jobs of one session run one at a time, in the order they were accepted
(``workers.scheduler.turns`` says who starts whom). A job whose turn has come waits in its
lane's ready list until a gather task takes it into a batch (``workers.scheduler.batches``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum, StrEnum

import redis

from pipeline.adapters.redis_errors import redis_errors
from pipeline.domain.state import JobState
from workers.scheduler.scripts import Scripts

log = logging.getLogger("memq.worker")

STATE_TTL_S = 7 * 86_400
DRAIN_LOCK = "drain-parked"
BATCH_TTL_S = 86_400
# The fewest jobs a batch takes when the lane's jobs are spread over its slots: below this a
# second batch costs more (its hops, its calls) than it runs beside the first.
SPREAD_FROM = 8


class Lane(StrEnum):
    """Where a job waits and runs: live traffic, or a backfill's jobs, which keep to their own
    ready list, batch slots and queue so they never starve live traffic. Its value is what the
    gather task's message and a run's record carry."""

    LIVE = "live"
    BACKFILL = "backfill"

    @classmethod
    def of(cls, backfill: bool) -> Lane:
        return cls.BACKFILL if backfill else cls.LIVE


class TakeOutcome(Enum):
    """What a gather's ``take_batch`` found."""

    TAKEN = "taken"  # the batch's jobs (none when nothing was ready)
    NO_SLOT = "no slot"  # every batch slot of the lane is taken: ready jobs wait for one
    LAUNCHED = "launched"  # the batch's chain was sent already: a late redelivery takes nothing


@dataclass(frozen=True)
class Taken:
    """The jobs of a batch, with what ``take_batch`` found."""

    outcome: TakeOutcome
    jobs: list[str] = field(default_factory=list)


class RedisStateStore:
    """Keys live under ``memq:{namespace}:`` (the index prefix), so deployments or test runs
    sharing one Redis never see each other's jobs."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.prefix = f"memq:{namespace}"
        self.scripts = Scripts(client)

    def _state(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:state"

    def _session(self, session_key: str) -> str:
        digest = hashlib.sha1(session_key.encode(), usedforsecurity=False).hexdigest()
        return f"{self.prefix}:session:{digest}"

    def save(self, state: JobState) -> None:
        with redis_errors("save job state"):
            self.client.set(self._state(state.job_id), state.model_dump_json(), ex=STATE_TTL_S)

    def load(self, job_id: str) -> JobState | None:
        with redis_errors("load job state"):
            raw = self.client.get(self._state(job_id))
        return JobState.model_validate_json(raw) if raw is not None else None

    def save_many(self, states: list[JobState]) -> None:
        """Save the states of a batch's jobs in one round trip."""
        if not states:
            return
        with redis_errors("save job states"):
            pipe = self.client.pipeline(transaction=False)
            for state in states:
                pipe.set(self._state(state.job_id), state.model_dump_json(), ex=STATE_TTL_S)
            pipe.execute()

    def load_many(self, job_ids: list[str]) -> list[JobState | None]:
        """The states of ``job_ids`` (None for a job that has ended) in one round trip."""
        if not job_ids:
            return []
        with redis_errors("load job states"):
            raw = self.client.mget([self._state(job_id) for job_id in job_ids])
        return [JobState.model_validate_json(r) if r is not None else None for r in raw]

    # -- the ready lists and the batches taken from them ----------------------------------------

    def push_ready(self, lane: str, *job_ids: str) -> int:
        """Put jobs whose turn has come at the end of their lane's ready list, in this order;
        returns how many jobs became ready in this lane during the current second (a measure
        of load)."""
        with redis_errors("mark a job ready"):
            pipe = self.client.pipeline()
            pipe.rpush(self._ready(lane), *job_ids)
            pipe.incrby(self._arrivals(lane), len(job_ids))
            pipe.expire(self._arrivals(lane), 1, nx=True)
            pipe.sadd(self._ready_jobs(lane), *job_ids)
            pipe.expire(self._ready_jobs(lane), STATE_TTL_S)
            return int(pipe.execute()[1])

    def unready(self, lane: str, *job_ids: str) -> None:
        with redis_errors("unmark a ready job"):
            pipe = self.client.pipeline()
            for job_id in job_ids:
                pipe.lrem(self._ready(lane), 0, job_id)
            pipe.srem(self._ready_jobs(lane), *job_ids)
            pipe.execute()

    def admitted(self, lane: str, job_ids: list[str]) -> None:
        """A gather has looked at these jobs (run them, or left them to wait for their turn):
        they are no longer waiting to be gathered."""
        if job_ids:
            with redis_errors("unmark gathered jobs"):
                self.client.srem(self._ready_jobs(lane), *job_ids)

    def is_ready(self, lane: str, job_id: str) -> bool:
        """The job was made ready and no gather has looked at it yet (one set lookup, where the
        ready list itself would have to be scanned)."""
        with redis_errors("check a ready job"):
            return bool(self.client.sismember(self._ready_jobs(lane), job_id))

    def arrivals(self, lane: str) -> int:
        """Jobs that became ready in this lane during the current second."""
        with redis_errors("read the arrival count"):
            return int(self.client.get(self._arrivals(lane)) or 0)

    def take_batch(
        self,
        batch_id: str,
        lane: str,
        *,
        limit: int,
        in_flight: int,
        now: float,
        lost_s: float,
        spread: bool = False,
    ) -> Taken:
        """The jobs of batch ``batch_id``: those it already holds, topped up from the lane's
        ready list to ``limit``. A new batch takes none while ``in_flight`` batches of the lane
        run (started less than ``lost_s`` ago): then ``NO_SLOT`` if jobs are waiting.
        ``LAUNCHED`` once the batch was launched.

        With ``spread``, the lane's jobs (ready, and in its other running batches) are spread
        over its ``in_flight`` slots: a batch takes its even share of them, and never less than
        SPREAD_FROM (a small batch goes whole). So 20 sessions run as two trains of 10, each
        on a process of its own, rather than one of 17 beside one of 3 with a process idle."""
        with redis_errors("take a batch of ready jobs"):
            taken = self.scripts.take_batch(
                batch=self._batch(batch_id),
                ready=self._ready(lane),
                launched=self._launched(batch_id),
                in_flight=self._in_flight(lane),
                limit=limit,
                ttl_s=BATCH_TTL_S,
                slots=in_flight,
                now=now,
                lost_before=now - lost_s,
                batch_id=batch_id,
                batch_prefix=self._batch(""),
                spread_from=SPREAD_FROM,
                spread=spread,
            )
        if taken is None:
            return Taken(TakeOutcome.LAUNCHED)
        if isinstance(taken, int):
            return Taken(TakeOutcome.NO_SLOT)
        return Taken(TakeOutcome.TAKEN, [raw.decode() for raw in taken])

    def room_for_more(self, lane: str, in_flight: int, since: float) -> bool:
        """Jobs wait in the lane's ready list and a batch slot is free (batches started
        before ``since`` are lost and hold none): a batch that took its share leaves them for
        another gather."""
        with redis_errors("look at a ready list"):
            pipe = self.client.pipeline()
            pipe.llen(self._ready(lane))
            pipe.zcount(self._in_flight(lane), since, "+inf")
            waiting, running = pipe.execute()
        return bool(waiting) and int(running) < in_flight

    def batch_ended(self, batch_id: str, lanes: tuple[Lane, ...]) -> list[Lane]:
        """The batch no longer counts as in flight; returns the lanes with jobs still ready."""
        with redis_errors("end a batch"):
            pipe = self.client.pipeline()
            for lane in lanes:
                pipe.zrem(self._in_flight(lane), batch_id)
                pipe.llen(self._ready(lane))
            replies = pipe.execute()
        return [lane for lane, waiting in zip(lanes, replies[1::2], strict=True) if waiting]

    def first_to_recheck(self, lane: str, every_s: float) -> bool:
        """True for one caller per ``every_s`` per lane: who schedules the next look at a
        ready list that found every batch slot taken."""
        with redis_errors("schedule a ready-list check"):
            key = f"{self._ready(lane)}:recheck"
            return bool(self.client.set(key, 1, nx=True, px=int(every_s * 1000)))

    def launched(self, batch_id: str) -> None:
        """The batch's chain is sent: a redelivered gather must neither resend it nor take
        more jobs."""
        with redis_errors("mark a batch launched"):
            self.client.set(self._launched(batch_id), 1, ex=BATCH_TTL_S)

    def release_batch(self, batch_id: str, lane: str) -> list[str]:
        """Give an unlaunched batch's jobs back to the front of the ready list."""
        with redis_errors("release a batch"):
            members = [
                raw.decode() if isinstance(raw, bytes) else str(raw)
                for raw in self.client.lrange(self._batch(batch_id), 0, -1)
            ]
            if members:
                pipe = self.client.pipeline()
                pipe.lpush(self._ready(lane), *reversed(members))
                pipe.sadd(self._ready_jobs(lane), *members)
                pipe.delete(self._batch(batch_id))
                pipe.execute()
        return members

    def _ready(self, lane: str) -> str:
        return f"{self.prefix}:ready:{lane}"

    def _ready_jobs(self, lane: str) -> str:
        """The ids in the lane's ready list (or taken from it by a gather not yet at them)."""
        return f"{self.prefix}:ready:{lane}:jobs"

    def _arrivals(self, lane: str) -> str:
        return f"{self.prefix}:ready:{lane}:arrivals"

    def _in_flight(self, lane: str) -> str:
        return f"{self.prefix}:ready:{lane}:in-flight"

    def _batch(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}"

    def _launched(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}:launched"

    def exists(self, job_id: str) -> bool:
        with redis_errors("check job state"):
            return bool(self.client.exists(self._state(job_id)))

    def delete(self, job_id: str) -> None:
        with redis_errors("delete job state"):
            self.client.delete(self._state(job_id))

    def forget(self, job_id: str, attempt: int) -> None:
        """The job has ended (its record says so): drop its state and its markers in
        the line (acceptance time, the attempt's turn); nothing of it outlives it in Redis."""
        keys = (self._state(job_id), self._accepted(job_id))
        deliveries = f"{self.prefix}:job:{job_id}:deliveries"
        with redis_errors("forget a finished job"):
            self.client.delete(*keys, self._turn(job_id, attempt), deliveries)

    # -- the per-session turnstile --------------------------------------------------------------

    def enter(self, state: JobState, now: datetime) -> bool:
        """Save the job's state and join the end of its session's line, in one atomic step;
        True when the job heads the line (nobody is ahead: it is to be started now). A job
        already in the line keeps its place, so finishing an intake twice is harmless."""
        with redis_errors("join the session line"):
            head = self.scripts.enter_line(
                state=self._state(state.job_id),
                line=self._session(state.request.scope.key),
                accepted=self._accepted(state.job_id),
                lines=self._lines,
                job_id=state.job_id,
                state_json=state.model_dump_json(),
                ttl_s=STATE_TTL_S,
                accepted_at=now.timestamp(),
            )
        return bool(head)

    def leave(self, state: JobState) -> None:
        """Undo ``enter`` for a job that could not be started (the broker refused it): out of
        its line, its state and acceptance time gone, as if never entered."""
        with redis_errors("leave the session line"):
            line = self._session(state.request.scope.key)
            self.scripts.leave_line(line=line, lines=self._lines, job_id=state.job_id)
            self.client.delete(self._state(state.job_id), self._accepted(state.job_id))

    # -- intakes under way: accepted in Elasticsearch, not yet started -------------------------

    def intake_begun(self, job_id: str, now: datetime) -> bool:
        """Note that an intake of the job has begun; False when one was already under way."""
        with redis_errors("note an intake"):
            return bool(self.client.zadd(self._intakes, {job_id: now.timestamp()}, nx=True))

    def intake_done(self, job_id: str) -> None:
        with redis_errors("end an intake"):
            self.client.zrem(self._intakes, job_id)

    def intakes_begun_before(self, before: float, limit: int) -> list[str]:
        """Intakes begun before ``before`` and never done, oldest first."""
        with redis_errors("list unfinished intakes"):
            raw = self.client.zrangebyscore(self._intakes, "-inf", before, start=0, num=limit)
        return [r.decode() if isinstance(r, bytes) else str(r) for r in raw]

    @property
    def _intakes(self) -> str:
        return f"{self.prefix}:intakes"

    # -- jobs accepted while Elasticsearch was down: in their lines, waiting for a record ------

    def note_unrecorded(self, job_id: str, now: datetime) -> None:
        """The job was accepted without its record (Elasticsearch down): it is to be recorded
        (``unrecorded``, oldest first) before it may start."""
        with redis_errors("note a job without a record"):
            self.client.zadd(self._unrecorded, {job_id: now.timestamp()}, nx=True)

    def unrecorded(self, limit: int) -> list[str]:
        """Jobs accepted without a record, oldest first."""
        with redis_errors("list jobs without a record"):
            raw = self.client.zrange(self._unrecorded, 0, limit - 1)
        return [r.decode() if isinstance(r, bytes) else str(r) for r in raw]

    def recorded(self, *job_ids: str) -> None:
        if job_ids:
            with redis_errors("note jobs recorded"):
                self.client.zrem(self._unrecorded, *job_ids)

    @property
    def _unrecorded(self) -> str:
        return f"{self.prefix}:unrecorded"

    def heads_line(self, session_key: str, job_id: str) -> bool:
        """Whether ``job_id`` is first in its session's line."""
        with redis_errors("check the session line"):
            return self._head(self._session(session_key)) == job_id

    def take_drain(self, owner: str, ttl_s: float) -> bool:
        """The one process that moves parked jobs into their lines for the next ``ttl_s``
        (``workers.intake.drain_parked``): two at once could interleave a session's jobs."""
        return self.take_lock(DRAIN_LOCK, owner, ttl_s)

    def end_drain(self, owner: str) -> None:
        self.end_lock(DRAIN_LOCK, owner)

    def take_lock(self, name: str, owner: str, ttl_s: float) -> bool:
        """Hold the lock ``name`` as ``owner`` for ``ttl_s`` when nobody holds it; False when
        another does. A holder that dies lets it lapse with the TTL."""
        with redis_errors(f"take the lock {name}"):
            return bool(self.client.set(self._lock(name), owner, nx=True, px=int(ttl_s * 1000)))

    def renew_lock(self, name: str, owner: str, ttl_s: float) -> bool:
        """Hold the lock ``name`` for ``ttl_s`` more while ``owner`` holds it; False when it
        lapsed or another holds it (the holder should stop)."""
        with redis_errors(f"renew the lock {name}"):
            renewed = self.scripts.renew_lock(
                lock=self._lock(name), owner=owner, ttl_ms=int(ttl_s * 1000)
            )
        return bool(renewed)

    def lock_owner(self, name: str) -> str | None:
        """Who holds the lock ``name``; None when nobody does."""
        with redis_errors(f"read the lock {name}"):
            owner = self.client.get(self._lock(name))
        return owner.decode() if isinstance(owner, bytes) else owner

    def end_lock(self, name: str, owner: str) -> None:
        with redis_errors(f"end the lock {name}"):
            if self.client.get(self._lock(name)) == owner.encode():
                self.client.delete(self._lock(name))

    def _lock(self, name: str) -> str:
        return f"{self.prefix}:{name}"

    def take_turn(self, job_id: str, attempt: int, owner: str) -> bool:
        """True for the one chain (``owner``, a task id) that runs this attempt of the job, and
        again for that same task when it is delivered a second time; False for any other chain
        started for the same attempt (a hand-on racing the job's own wait)."""
        key = self._turn(job_id, attempt)
        with redis_errors("take the job's turn"):
            if self.client.set(key, owner, nx=True, ex=STATE_TTL_S):
                return True
            taken = self.client.get(key)
        return isinstance(taken, bytes) and taken.decode() == owner

    def my_turn(self, session_key: str, job_id: str, now: datetime) -> bool:
        """True when ``job_id`` heads its session's line. A head whose state is gone (it ended
        or expired without leaving the line) is removed, so one lost job cannot block a
        session. A head that still has its state keeps its place however long it has waited or
        run: while it runs, its batch's lease says it is alive (``workers.scheduler.leases``), and
        when that lease lapses the reaper sends it on or ends it, which frees the line. Age alone
        says nothing under a long backlog."""
        key = self._session(session_key)
        with redis_errors("check the session line"):
            head = self._head(key)
            while head is not None and head != job_id and not self.exists(head):
                log.warning("job %s blocked its session line and was removed from it", head)
                self.client.lrem(key, 1, head)
                head = self._head(key)
        return head is None or head == job_id

    def _accepted(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}:accepted"

    def _turn(self, job_id: str, attempt: int) -> str:
        return f"{self.prefix}:job:{job_id}:turn:{attempt}"

    def _head(self, key: str) -> str | None:
        raw = self.client.lindex(key, 0)
        return raw.decode() if isinstance(raw, bytes) else None

    def leave_line(self, session_key: str, job_id: str) -> str | None:
        """Leave the line; returns the job now at its head, read in the same atomic step (a job
        joining meanwhile is either seen here or finds itself at the head)."""
        with redis_errors("leave the session line"):
            line = self._session(session_key)
            head = self.scripts.leave_line(line=line, lines=self._lines, job_id=job_id)
        return head.decode() if isinstance(head, bytes) else None

    @property
    def _lines(self) -> str:
        """The set of session lines that have jobs (the reaper walks it)."""
        return f"{self.prefix}:lines"

    def line_heads(self, count: int) -> list[tuple[str, str]]:
        """Up to about ``count`` session lines and the job heading each, walking the set of
        lines a slice per call (the cursor is kept in Redis, as each call may be another
        process's); a line found empty leaves the set."""
        cursor_key = f"{self._lines}:cursor"
        with redis_errors("walk the session lines"):
            cursor = int(self.client.get(cursor_key) or 0)
            cursor, lines = self.client.sscan(self._lines, cursor, count=count)
            self.client.set(cursor_key, cursor, ex=STATE_TTL_S)
            keys = [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in lines]
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.lindex(key, 0)
            heads = pipe.execute()
            empty = [key for key, head in zip(keys, heads, strict=True) if head is None]
            if empty:
                self.client.srem(self._lines, *empty)
        return [(k, h.decode()) for k, h in zip(keys, heads, strict=True) if h is not None]

    def next_in_lines(self, session_keys: list[str]) -> list[str]:
        """The job second in each of these sessions' lines (the one whose turn comes when the
        head ends), in one round trip; lines with no second job add nothing."""
        if not session_keys:
            return []
        with redis_errors("read the next jobs of session lines"):
            pipe = self.client.pipeline(transaction=False)
            for key in session_keys:
                pipe.lindex(self._session(key), 1)
            raw = pipe.execute()
        return [r.decode() for r in raw if isinstance(r, bytes)]

    def leave_line_at(self, line: str, job_id: str) -> str | None:
        """``leave_line`` for a line known by its key (as ``line_heads`` names it)."""
        with redis_errors("leave the session line"):
            head = self.scripts.leave_line(line=line, lines=self._lines, job_id=job_id)
        return head.decode() if isinstance(head, bytes) else None

    def accepted_at(self, job_id: str) -> float | None:
        with redis_errors("read a job's acceptance time"):
            raw = self.client.get(self._accepted(job_id))
        return float(raw) if raw is not None else None

    def accepted_many(self, job_ids: list[str]) -> dict[str, float]:
        """``accepted_at`` of several jobs in one round trip (a job without one is left out)."""
        if not job_ids:
            return {}
        with redis_errors("read jobs' acceptance times"):
            raw = self.client.mget([self._accepted(job_id) for job_id in job_ids])
        pairs = zip(job_ids, raw, strict=True)
        return {job_id: float(at) for job_id, at in pairs if at is not None}

    def ready_count(self, lane: str) -> int:
        with redis_errors("count ready jobs"):
            return int(self.client.llen(self._ready(lane)))
