"""The scheduler's Lua scripts, one typed call each.

Each script lives in ``workers/scheduler/<name>.lua``, with its contract at its top and its
keys and arguments named there (``local run = KEYS[1]``). ``Scripts`` loads them all once per
Redis client (``pipeline.adapters.redis_scripts``, as the API's search slots load theirs), and
offers each as a method whose parameters are keyword-only and named as in the script, so no
caller lines up positional keys and arguments. The methods return the raw reply; the stores
(``state_store``, ``leases``) turn it into their typed results.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.commands.core import Script

from pipeline.adapters.redis_scripts import register

Arg = str | int | float


class Scripts:
    """The scripts, registered on ``client``."""

    NAMES = (
        "renew_lock",
        "take_batch",
        "enter_line",
        "leave_line",
        "claim_run",
        "renew_lease",
        "hand_on_run",
        "mark_sent",
        "defer_run",
        "close_run",
        "take_run",
    )

    def __init__(self, client: redis.Redis) -> None:
        self._scripts: dict[str, Script] = {
            name: register(client, "workers.scheduler", name) for name in self.NAMES
        }

    def _run(self, name: str, keys: list[str], args: list[Arg]) -> Any:
        return self._scripts[name](keys=keys, args=args)

    # -- locks, batches and lines (``state_store``) ------------------------------------------

    def renew_lock(self, *, lock: str, owner: str, ttl_ms: int) -> Any:
        return self._run("renew_lock", [lock], [owner, ttl_ms])

    def take_batch(
        self,
        *,
        batch: str,
        ready: str,
        launched: str,
        in_flight: str,
        limit: int,
        ttl_s: int,
        slots: int,
        now: float,
        lost_before: float,
        batch_id: str,
        batch_prefix: str,
        spread_from: int,
        spread: bool,
    ) -> Any:
        keys = [batch, ready, launched, in_flight]
        args: list[Arg] = [limit, ttl_s, slots, now, lost_before, batch_id, batch_prefix]
        return self._run("take_batch", keys, [*args, spread_from, int(spread)])

    def enter_line(
        self,
        *,
        state: str,
        line: str,
        accepted: str,
        lines: str,
        job_id: str,
        state_json: str,
        ttl_s: int,
        accepted_at: float,
    ) -> Any:
        keys = [state, line, accepted, lines]
        return self._run("enter_line", keys, [job_id, state_json, ttl_s, accepted_at])

    def leave_line(self, *, line: str, lines: str, job_id: str) -> Any:
        return self._run("leave_line", [line, lines], [job_id])

    # -- runs and their leases (``leases``) ----------------------------------------------------

    def claim_run(
        self,
        *,
        run: str,
        leases: str,
        phase: str,
        task_id: str,
        token: str,
        expires: float,
        run_id: str,
        may_create: bool,
        lane: str,
        ttl_s: int,
    ) -> Any:
        args: list[Arg] = [phase, task_id, token, expires, run_id, "1" if may_create else "0"]
        return self._run("claim_run", [run, leases], [*args, lane, ttl_s])

    def renew_lease(self, *, run: str, leases: str, token: str, expires: float, run_id: str) -> Any:
        return self._run("renew_lease", [run, leases], [token, expires, run_id])

    def hand_on_run(
        self,
        *,
        run: str,
        leases: str,
        token: str,
        phase: str,
        jobs_json: str,
        expires: float | None,
        run_id: str,
    ) -> Any:
        """``jobs_json`` '' keeps the run's jobs; ``expires`` None leaves it without a lease."""
        args: list[Arg] = [token, phase, jobs_json, "" if expires is None else expires, run_id]
        return self._run("hand_on_run", [run, leases], args)

    def mark_sent(self, *, run: str, leases: str, phase: str, run_id: str, pickup_by: float) -> Any:
        return self._run("mark_sent", [run, leases], [phase, run_id, pickup_by])

    def defer_run(self, *, run: str, leases: str, deadline: float, run_id: str) -> Any:
        return self._run("defer_run", [run, leases], [deadline, run_id])

    def close_run(self, *, run: str, leases: str, token: str, run_id: str) -> Any:
        """``token`` '*' closes the run whoever owns it."""
        return self._run("close_run", [run, leases], [token, run_id])

    def take_run(self, *, run: str, leases: str, before: float, run_id: str) -> Any:
        return self._run("take_run", [run, leases], [before, run_id])
