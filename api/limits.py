"""Per-tenant limits, shared by every API process through Redis, answered 429 with Retry-After.

- Requests per second on the write paths (add, update, delete, batches) and on the search paths
  (a batch search costs one per query): a fixed window per tenant (``MEMQ_API_RATE_WINDOW_S``,
  one second by default), counted by the ``limits`` library in Redis
  (``MEMQ_API_RATE_WRITE_PER_S``, ``MEMQ_API_RATE_SEARCH_PER_S``; 0 turns a limit off).
- Reads (``GET`` of a memory, its history, a listing page, a job: ``MEMQ_API_RATE_READ_PER_S``),
  charged once per request by the routers that serve them.
- A batch costs its items (``POST /v1/batches``, mem0's batch update and delete); a batch
  above one window's allowance closes the windows it spans (``charge``).
- Units of costly search work per second (``MEMQ_API_SEARCH_COST_PER_S``): what a search
  asks beyond a plain one (``pipeline.serving.search_cost``), charged by the searcher every surface
  uses (``api/search_slots.py``), so a tenant's costly searches per second are bounded
  whatever its searches per second.
- Open listing cursors: each cursor holds an Elasticsearch point in time, and a node keeps only
  so many (``search.max_open_pit_context``), so one tenant may hold at most
  ``MEMQ_API_OPEN_CURSORS_PER_TENANT`` at once. A cursor counts until its listing reaches the
  last page or its keep-alive lapses.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from typing import Annotated, Literal, cast

import redis
from fastapi import Depends, Request
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import MemoryStorage, RedisStorage
from limits.strategies import FixedWindowRateLimiter

from api.deps import PrincipalDep
from pipeline.adapters.redis_errors import redis_errors
from pipeline.config import ApiConfig
from pipeline.errors import InvalidInputError, MemqError, TransientError
from pipeline.serving.listing import PIT_KEEP_ALIVE_S, Page

Path = Literal["write", "search", "read", "search_cost"]

REASONS: dict[Path, str] = {
    "write": "write requests",
    "search": "search requests",
    "read": "read requests",
    "search_cost": (
        "units of costly search work (substring conditions, in/nin values, rerank, many "
        "hits: docs/ARCHITECTURE.md, Security)"
    ),
}
"""What each path counts, as a refusal names it."""


class RateLimitedError(MemqError):
    """Over a per-tenant limit: 429, and ``retry_after_s`` says when to come back."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.retry_after_s = max(1, retry_after_s)


class TenantLimits:
    """The limits of one deployment (``namespace`` keeps test runs sharing a Redis apart)."""

    def __init__(self, config: ApiConfig, client: redis.Redis, url: str, namespace: str) -> None:
        self.client = client
        self.prefix = f"memq:{namespace}"
        self.storage = RedisStorage(url)
        self.limiter = FixedWindowRateLimiter(self.storage)
        self.local = FixedWindowRateLimiter(MemoryStorage())
        self.items: dict[Path, RateLimitItem | None] = {
            "write": per_window(config.rate_write_per_s, config.rate_window_s),
            "search": per_window(config.rate_search_per_s, config.rate_window_s),
            "read": per_window(config.rate_read_per_s, config.rate_window_s),
            "search_cost": per_window(config.search_cost_per_s, config.rate_window_s),
        }
        self.open_cursors = config.open_cursors_per_tenant

    def charge(self, tenant: str, path: Path, cost: int = 1) -> None:
        """Count ``cost`` requests of ``tenant`` on ``path`` (a batch costs its items);
        ``RateLimitedError`` when over. A cost above one window's allowance takes a whole
        window and keeps the tenant's ``path`` closed for as many more windows as it spans, so
        a batch is never cheaper than its items sent one by one. While Redis cannot be
        reached, each process counts on its own (``local``): the limit still holds per
        process, and the intake keeps accepting work through the outage."""
        item = self.items[path]
        if item is None:
            return
        names = (self.prefix, tenant, path)
        try:
            with redis_errors("count requests"):
                self._not_in_debt(tenant, path)
                if self.limiter.hit(item, *names, cost=min(cost, item.amount)):
                    self._owe(tenant, path, item, cost)
                    return
                left_s = self._window_left_s(item, tenant, path)
        except TransientError:  # Redis is down: this process counts on its own
            if self.local.hit(item, *names, cost=min(cost, item.amount)):
                return
            left_s = self.local.get_window_stats(item, *names).reset_time - time.time()
        raise RateLimitedError(
            f"over {item.amount} {REASONS[path]} in {item.multiples} s for this tenant",
            math.ceil(left_s),
        )

    def _debt(self, tenant: str, path: Path) -> str:
        return f"{self.prefix}:debt:{tenant}:{path}"

    def _owe(self, tenant: str, path: Path, item: RateLimitItem, cost: int) -> None:
        """A cost of more than one window closes the next windows it spans."""
        windows = math.ceil(cost / item.amount) - 1
        if windows > 0:
            self.client.set(self._debt(tenant, path), cost, px=windows * item.multiples * 1000)

    def _not_in_debt(self, tenant: str, path: Path) -> None:
        left_ms: int = self.client.pttl(self._debt(tenant, path))
        if left_ms > 0:
            raise RateLimitedError(
                f"a request costing more than one window's {REASONS[path]} is still being paid for",
                math.ceil(left_ms / 1000),
            )

    def _window_left_s(self, item: RateLimitItem, tenant: str, path: Path) -> float:
        """Seconds until the tenant's window on ``path`` ends, from the counter's expiry in
        milliseconds: the library's own reading rounds it to the nearest second, which would
        send a client back up to half a second before the window ends."""
        key = self.storage.prefixed_key(item.key_for(self.prefix, tenant, path))
        left_ms: int = self.client.pttl(key)
        return max(left_ms, 0) / 1000

    def _cursors(self, tenant: str) -> str:
        return f"{self.prefix}:cursors:{tenant}"

    def may_open_cursor(self, tenant: str) -> None:
        """``RateLimitedError`` when ``tenant`` already holds its share of open cursors."""
        if not self.open_cursors:
            return
        key, now = self._cursors(tenant), time.time()
        with redis_errors("count open cursors"):
            self.client.zremrangebyscore(key, 0, now)
            if self.client.zcard(key) < self.open_cursors:
                return
            oldest = cast(list[tuple[bytes, float]], self.client.zrange(key, 0, 0, withscores=True))
        lapse = oldest[0][1] - now if oldest else PIT_KEEP_ALIVE_S
        raise RateLimitedError(
            f"this tenant has {self.open_cursors} listing cursors open: page them to the end "
            "or wait for one to expire",
            math.ceil(lapse),
        )

    def cursor_open(self, tenant: str, cursor: str) -> None:
        """``cursor`` is open (again) for another keep-alive."""
        key = self._cursors(tenant)
        with redis_errors("count open cursors"):
            self.client.zadd(key, {_pit_of(cursor): time.time() + PIT_KEEP_ALIVE_S})
            self.client.expire(key, PIT_KEEP_ALIVE_S * 2)

    def cursor_closed(self, tenant: str, cursor: str) -> None:
        with redis_errors("count open cursors"):
            self.client.zrem(self._cursors(tenant), _pit_of(cursor))

    def owns_cursor(self, tenant: str, cursor: str) -> None:
        """``InvalidInputError`` unless ``cursor`` is one of ``tenant``'s open cursors. Its
        point in time is left untouched: another tenant's cursor (leaked, or guessed) neither
        reads nor closes it."""
        with redis_errors("check a listing cursor"):
            held = self.client.zscore(self._cursors(tenant), _pit_of(cursor))
        if held is None or held < time.time():
            raise InvalidInputError(
                "the cursor is not an open one of this tenant's listings (it may have "
                "expired); start again without it",
                field="cursor",
            )

    def listing(self, tenant: str, cursor: str | None, read: Callable[[str | None], Page]) -> Page:
        """One page of a listing through ``read``, its cursor counted: a first page only
        within the tenant's share of open cursors, a next page only from the tenant's own
        cursor; REST and MCP list through here."""
        if cursor is None:
            self.may_open_cursor(tenant)
        else:
            self.owns_cursor(tenant, cursor)
        page = read(cursor)
        if page.cursor is not None:
            self.cursor_open(tenant, page.cursor)
        elif cursor is not None:
            self.cursor_closed(tenant, cursor)
        return page


def per_window(rate_per_s: int, window_s: int) -> RateLimitItem | None:
    """``rate_per_s`` as a limit counted over ``window_s`` seconds; None for no limit."""
    return RateLimitItemPerSecond(rate_per_s * window_s, window_s) if rate_per_s else None


def _pit_of(cursor: str) -> str:
    """The point in time a cursor holds (its later pages share it), as a short key."""
    from pipeline.serving.listing import decode_cursor

    pit, _ = decode_cursor(cursor)
    return hashlib.sha1(pit.encode(), usedforsecurity=False).hexdigest()


async def get_limits(request: Request) -> TenantLimits:
    limits: TenantLimits = request.app.state.limits
    return limits


LimitsDep = Annotated[TenantLimits, Depends(get_limits)]


def rate_limited(path: Path) -> Callable[[TenantLimits, PrincipalDep], None]:
    """A route dependency charging one request of the caller's tenant on ``path``."""

    def charge(limits: LimitsDep, principal: PrincipalDep) -> None:
        limits.charge(principal.tenant, path)

    return charge


def read_limited(request: Request, limits: LimitsDep, principal: PrincipalDep) -> None:
    """A router dependency charging one read of the caller's tenant for each GET."""
    if request.method in ("GET", "HEAD"):
        limits.charge(principal.tenant, "read")


WriteLimited = Depends(rate_limited("write"))
ReadLimited = Depends(read_limited)
SearchLimited = Depends(rate_limited("search"))
