"""The scheduler's Redis state in memory: ``MemoryStateStore`` and ``MemoryRunLeases`` keep the
rules of ``RedisStateStore`` and ``RunLeases`` (and of their Lua scripts) over dicts and lists,
for one process. The rules are tested over both (``tests/unit/test_scheduler_rules.py``, and
``tests/integration/test_scheduler_contract.py`` on the real Redis).

What they leave out: key expiry (a job state's 7 days, a batch's day), and sharing between
processes. Time comes from ``clock`` (seconds) where Redis keeps its own: the arrival count of
the current second, the once-per-interval turns (``first_to_recheck``, ``first_to_reap``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from datetime import datetime

from pipeline.domain.state import JobState
from workers.scheduler.leases import GATHERING, Claim, RunRecord
from workers.scheduler.state_store import SPREAD_FROM, Lane, Taken, TakeOutcome


class MemoryStateStore:
    """Job states, session lines, ready lists and batches (``RedisStateStore``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.states: dict[str, str] = {}  # job id -> state JSON
        self.lines: dict[str, list[str]] = {}  # session key -> its line
        self.accepted: dict[str, float] = {}
        self.turns: dict[tuple[str, int], str] = {}
        self.ready: dict[str, list[str]] = {}
        self.ready_jobs: dict[str, set[str]] = {}
        self.arrived: dict[str, tuple[int, int]] = {}  # lane -> (second, count)
        self.in_flight: dict[str, dict[str, float]] = {}  # lane -> batch id -> start
        self.batches: dict[str, list[str]] = {}
        self.launched_batches: set[str] = set()
        self.rechecks: dict[str, float] = {}
        self.intakes: dict[str, float] = {}  # job id -> when its intake began
        self.unrecorded_jobs: dict[str, float] = {}  # job id -> when it was held
        self.drainer: tuple[str, float] | None = None  # (owner, until)

    # -- job states ---------------------------------------------------------------------------

    def save(self, state: JobState) -> None:
        self.states[state.job_id] = state.model_dump_json()

    def save_many(self, states: list[JobState]) -> None:
        for state in states:
            self.save(state)

    def load(self, job_id: str) -> JobState | None:
        raw = self.states.get(job_id)
        return JobState.model_validate_json(raw) if raw is not None else None

    def load_many(self, job_ids: list[str]) -> list[JobState | None]:
        return [self.load(job_id) for job_id in job_ids]

    def exists(self, job_id: str) -> bool:
        return job_id in self.states

    def delete(self, job_id: str) -> None:
        self.states.pop(job_id, None)

    def forget(self, job_id: str, attempt: int) -> None:
        self.states.pop(job_id, None)
        self.accepted.pop(job_id, None)
        self.turns.pop((job_id, attempt), None)

    # -- the ready lists and the batches taken from them ----------------------------------------

    def push_ready(self, lane: str, *job_ids: str) -> int:
        self.ready.setdefault(lane, []).extend(job_ids)
        self.ready_jobs.setdefault(lane, set()).update(job_ids)
        second = int(self.clock())
        since, count = self.arrived.get(lane, (second, 0))
        count = count + len(job_ids) if since == second else len(job_ids)
        self.arrived[lane] = (second, count)
        return count

    def unready(self, lane: str, *job_ids: str) -> None:
        gone = set(job_ids)
        self.ready[lane] = [j for j in self.ready.get(lane, []) if j not in gone]
        self.ready_jobs.get(lane, set()).difference_update(gone)

    def admitted(self, lane: str, job_ids: list[str]) -> None:
        self.ready_jobs.get(lane, set()).difference_update(job_ids)

    def is_ready(self, lane: str, job_id: str) -> bool:
        return job_id in self.ready_jobs.get(lane, set())

    def arrivals(self, lane: str) -> int:
        second, count = self.arrived.get(lane, (-1, 0))
        return count if second == int(self.clock()) else 0

    def ready_count(self, lane: str) -> int:
        return len(self.ready.get(lane, []))

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
        """As ``take_batch.lua``."""
        if batch_id in self.launched_batches:
            return Taken(TakeOutcome.LAUNCHED)
        ready, running = self.ready.setdefault(lane, []), self.in_flight.setdefault(lane, {})
        members = list(self.batches.get(batch_id, []))
        if not members:
            if not ready:
                return Taken(TakeOutcome.TAKEN)
            for lost in [b for b, start in running.items() if start <= now - lost_s]:
                del running[lost]
            if len(running) >= in_flight:
                return Taken(TakeOutcome.NO_SLOT)
        want = limit - len(members)
        if want > 0 and spread and in_flight > 1:
            others = sum(len(self.batches.get(b, [])) for b in running if b != batch_id)
            share = max(SPREAD_FROM, math.ceil((len(ready) + others + len(members)) / in_flight))
            want = min(want, share - len(members))
        if want > 0 and ready:
            got, ready[:want] = ready[:want], []
            members += got
            self.batches[batch_id] = members
            running[batch_id] = now
        return Taken(TakeOutcome.TAKEN, members)

    def room_for_more(self, lane: str, in_flight: int, since: float) -> bool:
        running = [b for b, start in self.in_flight.get(lane, {}).items() if start >= since]
        return bool(self.ready.get(lane)) and len(running) < in_flight

    def batch_ended(self, batch_id: str, lanes: tuple[Lane, ...]) -> list[Lane]:
        for lane in lanes:
            self.in_flight.get(lane, {}).pop(batch_id, None)
        return [lane for lane in lanes if self.ready.get(lane)]

    def first_to_recheck(self, lane: str, every_s: float) -> bool:
        now = self.clock()
        if self.rechecks.get(lane, -math.inf) > now:
            return False
        self.rechecks[lane] = now + every_s
        return True

    def launched(self, batch_id: str) -> None:
        self.launched_batches.add(batch_id)

    def release_batch(self, batch_id: str, lane: str) -> list[str]:
        members = self.batches.pop(batch_id, [])
        self.ready[lane] = members + self.ready.get(lane, [])
        self.ready_jobs.setdefault(lane, set()).update(members)
        return members

    # -- the per-session lines --------------------------------------------------------------------

    def enter(self, state: JobState, now: datetime) -> bool:
        """As ``enter_line.lua``."""
        self.save(state)
        line = self.lines.setdefault(state.request.scope.key, [])
        if state.job_id not in line:
            line.append(state.job_id)
            self.accepted[state.job_id] = now.timestamp()
        return line[0] == state.job_id

    def leave(self, state: JobState) -> None:
        self.leave_line(state.request.scope.key, state.job_id)
        self.states.pop(state.job_id, None)
        self.accepted.pop(state.job_id, None)

    def leave_line(self, session_key: str, job_id: str) -> str | None:
        """As ``leave_line.lua`` (a line that empties leaves the set of lines)."""
        line = [j for j in self.lines.get(session_key, []) if j != job_id]
        if line:
            self.lines[session_key] = line
            return line[0]
        self.lines.pop(session_key, None)
        return None

    def leave_line_at(self, line: str, job_id: str) -> str | None:
        return self.leave_line(line, job_id)

    def heads_line(self, session_key: str, job_id: str) -> bool:
        return self._head(session_key) == job_id

    def my_turn(self, session_key: str, job_id: str, now: datetime) -> bool:
        head = self._head(session_key)
        while head is not None and head != job_id and not self.exists(head):
            self.lines[session_key].remove(head)
            head = self._head(session_key)
        return head is None or head == job_id

    def take_turn(self, job_id: str, attempt: int, owner: str) -> bool:
        return self.turns.setdefault((job_id, attempt), owner) == owner

    def line_heads(self, count: int) -> list[tuple[str, str]]:
        """Every line's head (a memory walk needs no cursor); empty lines leave."""
        for key in [key for key, line in self.lines.items() if not line]:
            del self.lines[key]
        return [(key, line[0]) for key, line in list(self.lines.items())[:count]]

    def next_in_lines(self, session_keys: list[str]) -> list[str]:
        lines = (self.lines.get(key, []) for key in session_keys)
        return [line[1] for line in lines if len(line) > 1]

    def accepted_at(self, job_id: str) -> float | None:
        return self.accepted.get(job_id)

    def accepted_many(self, job_ids: list[str]) -> dict[str, float]:
        return {j: self.accepted[j] for j in job_ids if j in self.accepted}

    def _head(self, session_key: str) -> str | None:
        line = self.lines.get(session_key)
        return line[0] if line else None

    # -- intakes under way, jobs held without a record, the drain's lock ----------------------

    def intake_begun(self, job_id: str, now: datetime) -> bool:
        if job_id in self.intakes:
            return False
        self.intakes[job_id] = now.timestamp()
        return True

    def intake_done(self, job_id: str) -> None:
        self.intakes.pop(job_id, None)

    def intakes_begun_before(self, before: float, limit: int) -> list[str]:
        begun = sorted((at, job) for job, at in self.intakes.items() if at <= before)
        return [job for _, job in begun[:limit]]

    def note_unrecorded(self, job_id: str, now: datetime) -> None:
        self.unrecorded_jobs.setdefault(job_id, now.timestamp())

    def unrecorded(self, limit: int) -> list[str]:
        held = sorted((at, job) for job, at in self.unrecorded_jobs.items())
        return [job for _, job in held[:limit]]

    def recorded(self, *job_ids: str) -> None:
        for job_id in job_ids:
            self.unrecorded_jobs.pop(job_id, None)

    def take_drain(self, owner: str, ttl_s: float) -> bool:
        now = self.clock()
        if self.drainer is not None and self.drainer[1] > now and self.drainer[0] != owner:
            return False
        self.drainer = (owner, now + ttl_s)
        return True

    def end_drain(self, owner: str) -> None:
        if self.drainer is not None and self.drainer[0] == owner:
            self.drainer = None


class MemoryRunLeases:
    """Run records and their leases (``RunLeases``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.runs: dict[str, dict[str, str]] = {}
        self.leases: dict[str, float] = {}
        self.deliveries: dict[str, int] = {}
        self.next_reap = -math.inf

    def claim(
        self, run_id: str, phase: str, *, task_id: str, token: str, expires: float, lane: str = ""
    ) -> Claim:
        """As ``claim_run.lua``."""
        run, gather = self.runs.get(run_id), phase == GATHERING
        if run is None:
            if not gather:
                return Claim.STALE
            self.runs[run_id] = {"phase": phase, "owner": token, "lane": lane, "jobs": "[]"}
            self.leases[run_id] = expires
            return Claim.OWN
        if run["phase"] != phase:
            return Claim.STALE
        mine = run["owner"].startswith(f"{task_id}:")
        if run["owner"] == "" or (mine and gather):
            run["owner"] = token
            self.leases[run_id] = expires
            return Claim.OWN
        return Claim.REDELIVERED if mine else Claim.STALE

    def renew(self, run_id: str, token: str, expires: float) -> bool:
        if not self.owns(run_id, token):
            return False
        if run_id in self.leases:  # ZADD XX: only a lease that exists moves
            self.leases[run_id] = expires
        return True

    def hand_on(
        self,
        run_id: str,
        token: str,
        phase: str,
        *,
        jobs: list[str] | None = None,
        expires: float | None = None,
    ) -> bool:
        if not self.owns(run_id, token):
            return False
        run = self.runs[run_id]
        run.update(phase=phase, owner="")
        if jobs is not None:
            run["jobs"] = json.dumps(jobs)
        self._lease(run_id, expires or None)
        return True

    def schedule(
        self, run_id: str, phase: str, jobs: list[str], lane: str, expires: float | None
    ) -> None:
        self.runs[run_id] = {"phase": phase, "owner": "", "jobs": json.dumps(jobs), "lane": lane}
        self._lease(run_id, expires)

    def sent(self, run_id: str, phase: str, pickup_by: float) -> None:
        run = self.runs.get(run_id)
        if run is not None and run["phase"] == phase and run["owner"] == "":
            self.leases[run_id] = pickup_by

    def waiting(self, run_id: str) -> tuple[str, str] | None:
        run = self.runs.get(run_id)
        if run is None or run["owner"] != "":
            return None
        return run["phase"], run.get("lane", "")

    def defer(self, run_id: str, until: float) -> bool:
        run = self.runs.get(run_id)
        if run is None or run["owner"] != "" or run_id not in self.leases:
            return False
        self.leases[run_id] = until
        return True

    def exists(self, run_id: str) -> bool:
        return run_id in self.runs

    def existing(self, run_ids: list[str]) -> set[str]:
        return {run_id for run_id in run_ids if run_id in self.runs}

    def owns(self, run_id: str, token: str) -> bool:
        run = self.runs.get(run_id)
        return run is not None and run["owner"] == token

    def close(self, run_id: str, token: str = "*") -> bool:
        if token != "*" and not self.owns(run_id, token):
            return False
        self.runs.pop(run_id, None)
        self.leases.pop(run_id, None)
        return True

    def lapsed(self, now: float, limit: int = 100) -> list[str]:
        due = sorted((score, run_id) for run_id, score in self.leases.items() if score <= now)
        return [run_id for _, run_id in due[:limit]]

    def take(self, run_id: str, before: float) -> RunRecord | None:
        """As ``take_run.lua``."""
        score = self.leases.get(run_id)
        if score is None or score > before:
            return None
        del self.leases[run_id]
        run = self.runs.pop(run_id, None)
        if not run:
            return None
        return RunRecord(
            run_id=run_id,
            phase=run.get("phase", ""),
            jobs=list(json.loads(run.get("jobs") or "[]")),
            lane=run.get("lane", ""),
            owned=bool(run.get("owner")),
        )

    def delivered(self, job_id: str) -> int:
        self.deliveries[job_id] = self.deliveries.get(job_id, 0) + 1
        return self.deliveries[job_id]

    def first_to_reap(self, every_s: float) -> bool:
        now = self.clock()
        if now < self.next_reap:
            return False
        self.next_reap = now + every_s
        return True

    def _lease(self, run_id: str, expires: float | None) -> None:
        if expires is None:
            self.leases.pop(run_id, None)
        else:
            self.leases[run_id] = expires
