"""Ownership of a batch run, in Redis: who runs it now, and until when.

A *run* is a batch's trip down the phases (its id is the batch id, or a job's id and a suffix when a
job is sent on alone). Its record, ``memq:{ns}:run:{id}``, holds the phase the run is at, its jobs,
its lane and its owner: the execution token of the task running that phase, or empty while the next
phase's message waits in the broker. While a task owns the run, the run sits in the ``leases``
sorted set scored by the lease's expiry, which the owner's process renews
(``workers.scheduler.keeper``); a run whose score passed has lost its owner, and the reaper takes
it. A run also sits there, ownerless, while its next message is held back (a countdown) in a
worker's memory, where the broker could lose it with that worker.

Every transition is one Lua script, so a claim, a renewal, a hand-on and the reaper's take
never interleave: exactly one execution owns a run's phase at a time, and a task that is not
the owner (a late redelivery, an abandoned overrun) does nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

import redis

from pipeline.adapters.redis_errors import redis_errors
from workers.scheduler.scripts import Scripts
from workers.scheduler.state_store import BATCH_TTL_S, STATE_TTL_S

GATHERING = "gather"  # the phase of a run whose gather task has not launched its chain yet


class Claim(StrEnum):
    """What a task starting a phase of a run learns."""

    OWN = "own"  # it runs the phase
    STALE = "stale"  # the run is gone or elsewhere (another owner, a later phase): do nothing
    REDELIVERED = "redelivered"  # an earlier delivery of this very message died running it


@dataclass(frozen=True)
class RunRecord:
    """A run as the reaper takes it: where it was, with which jobs, and whether a task owned
    it when it lapsed (a worker died) or it was only waiting (a held-back message lost)."""

    run_id: str
    phase: str
    jobs: list[str]
    lane: str
    owned: bool


class RunLeases:
    """The run records and the ``leases`` set, under ``memq:{namespace}:``."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.prefix = f"memq:{namespace}"
        self.scripts = Scripts(client)

    def _run(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    @property
    def _leases(self) -> str:
        return f"{self.prefix}:leases"

    def _keys(self, run_id: str) -> dict[str, str]:
        """The keys every script of a run takes, and the run's id (its member in ``leases``)."""
        return {"run": self._run(run_id), "leases": self._leases, "run_id": run_id}

    def claim(
        self, run_id: str, phase: str, *, task_id: str, token: str, expires: float, lane: str = ""
    ) -> Claim:
        """Take the run's ``phase`` for the execution ``token`` (``task_id:...``) until
        ``expires``. A gather (phase ``GATHERING``) creates its run when there is none."""
        with redis_errors("claim a run"):
            reply = self.scripts.claim_run(
                **self._keys(run_id),
                phase=phase,
                task_id=task_id,
                token=token,
                expires=expires,
                may_create=phase == GATHERING,
                lane=lane,
                ttl_s=BATCH_TTL_S,
            )
        return Claim(reply.decode() if isinstance(reply, bytes) else str(reply))

    def renew(self, run_id: str, token: str, expires: float) -> bool:
        """Extend the lease; False when ``token`` no longer owns the run."""
        with redis_errors("renew a lease"):
            renewed = self.scripts.renew_lease(**self._keys(run_id), token=token, expires=expires)
        return bool(renewed)

    def hand_on(
        self,
        run_id: str,
        token: str,
        phase: str,
        *,
        jobs: list[str] | None = None,
        expires: float | None = None,
    ) -> bool:
        """The owner is done with its phase: the run now waits for ``phase``'s task, ownerless,
        with no lease, or one until ``expires`` while its message is not yet safe in the broker
        (about to be sent, or held back by a countdown). False if ``token`` no longer owns it."""
        with redis_errors("hand a run on"):
            handed = self.scripts.hand_on_run(
                **self._keys(run_id),
                token=token,
                phase=phase,
                jobs_json=json.dumps(jobs) if jobs is not None else "",
                expires=expires or None,
            )
        return bool(handed)

    def schedule(
        self, run_id: str, phase: str, jobs: list[str], lane: str, expires: float | None
    ) -> None:
        """A new run, waiting for ``phase``'s task (see ``hand_on`` for ``expires``)."""
        with redis_errors("schedule a run"):
            pipe = self.client.pipeline()
            key = self._run(run_id)
            pipe.hset(key, mapping={"phase": phase, "owner": "", "jobs": json.dumps(jobs)})
            pipe.hset(key, "lane", lane)
            pipe.expire(key, BATCH_TTL_S)
            if expires is None:
                pipe.zrem(self._leases, run_id)
            else:
                pipe.zadd(self._leases, {run_id: expires})
            pipe.execute()

    def sent(self, run_id: str, phase: str, pickup_by: float) -> None:
        """``phase``'s message is in the broker now: the run waits for a worker to claim it
        until ``pickup_by``. A message can still be lost after it was sent: a worker that
        reserved it (prefetch) or held it back (a countdown) and was then killed keeps it
        unacknowledged until the broker's visibility timeout. Past ``pickup_by`` the reaper
        sends the run's jobs on again; if the first message turns up later, it finds its run
        gone and does nothing. (A lease taken meanwhile by the task that claimed the run is
        left alone.)"""
        with redis_errors("mark a run's message sent"):
            self.scripts.mark_sent(**self._keys(run_id), phase=phase, pickup_by=pickup_by)

    def waiting(self, run_id: str) -> tuple[str, str] | None:
        """(phase, lane) of a run that nobody owns (its message waits somewhere), else None."""
        with redis_errors("read a run"):
            owner, phase, lane = self.client.hmget(self._run(run_id), ["owner", "phase", "lane"])
        if owner is None or phase is None or owner not in (b"", ""):
            return None
        return _text(phase), _text(lane or "")

    def defer(self, run_id: str, until: float) -> bool:
        """Move an unowned run's deadline to ``until``; False if it is owned or not leased."""
        with redis_errors("defer a run"):
            deferred = self.scripts.defer_run(**self._keys(run_id), deadline=until)
        return bool(deferred)

    def exists(self, run_id: str) -> bool:
        with redis_errors("check a run"):
            return bool(self.client.exists(self._run(run_id)))

    def existing(self, run_ids: list[str]) -> set[str]:
        """Those of ``run_ids`` that have a record, in one round trip."""
        if not run_ids:
            return set()
        with redis_errors("check runs"):
            pipe = self.client.pipeline(transaction=False)
            for run_id in run_ids:
                pipe.exists(self._run(run_id))
            found = pipe.execute()
        return {run_id for run_id, hit in zip(run_ids, found, strict=True) if hit}

    def owns(self, run_id: str, token: str) -> bool:
        with redis_errors("check a run's owner"):
            owner = self.client.hget(self._run(run_id), "owner")
        return isinstance(owner, bytes) and owner.decode() == token

    def close(self, run_id: str, token: str = "*") -> bool:
        """The run has ended (or lost all its jobs): forget it, if ``token`` still owns it."""
        with redis_errors("close a run"):
            closed = self.scripts.close_run(**self._keys(run_id), token=token)
        return bool(closed)

    def lapsed(self, now: float, limit: int = 100) -> list[str]:
        """Runs whose lease expired before ``now``, oldest first."""
        with redis_errors("list lapsed leases"):
            raw = self.client.zrangebyscore(self._leases, "-inf", now, start=0, num=limit)
        return [r.decode() if isinstance(r, bytes) else str(r) for r in raw]

    def take(self, run_id: str, before: float) -> RunRecord | None:
        """Remove and return the run if its lease expired before ``before`` (float('inf'):
        whatever its lease), for exactly one caller; None otherwise."""
        with redis_errors("take a lapsed run"):
            fields = self.scripts.take_run(**self._keys(run_id), before=before)
        if not fields:
            return None
        raw = dict(zip(fields[::2], fields[1::2], strict=True))
        text = {k.decode(): v.decode() for k, v in raw.items()}
        return RunRecord(
            run_id=run_id,
            phase=text.get("phase", ""),
            jobs=list(json.loads(text.get("jobs") or "[]")),
            lane=text.get("lane", ""),
            owned=bool(text.get("owner")),
        )

    def delivered(self, job_id: str) -> int:
        """Count one more delivery of the job that its worker did not survive; the total."""
        key = f"{self.prefix}:job:{job_id}:deliveries"
        with redis_errors("count a lost delivery"):
            pipe = self.client.pipeline()
            pipe.incr(key)
            pipe.expire(key, STATE_TTL_S)
            return int(pipe.execute()[0])

    def first_to_reap(self, every_s: float) -> bool:
        """True for one caller per ``every_s`` across every worker: who runs the reaper now."""
        with redis_errors("take the reaper's turn"):
            key = f"{self.prefix}:reaper"
            return bool(self.client.set(key, 1, nx=True, px=max(1, int(every_s * 1000))))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
