"""How many searches one tenant may have running at once, across API processes.

A search costs Elasticsearch CPU in proportion to its filters and the shard's size, and the
node's search threads are shared by every tenant: a tenant within its searches per second can
still keep every thread busy with costly ones, and every other tenant's searches queue behind
them. So each tenant holds at most ``MEMQ_API_SEARCHES_IN_FLIGHT_PER_TENANT`` slots (0: no
limit); a search beyond them is answered at once with 429 and a ``Retry-After`` that says
why, rather than held in an API thread (a waiting request would take a thread other tenants'
requests need).

Glossary: a *slot* is one running search of a tenant, a member of the Redis sorted set
``memq:{namespace}:searching:{tenant}`` scored with its *lapse* time: a slot whose API process
died is given back when it lapses (``SLOT_LAPSE_S``). Taking a slot is one Lua script
(``search_slots.lua``), so two processes never both take the last one. While Redis cannot be
reached, each process counts its own slots: the limit still holds per process.

A batch search holds one slot: its queries run in the same two Elasticsearch round trips,
and the searches-per-second limit already charges each of them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.resources import files

import redis

from pipeline.errors import TransientError
from pipeline.redis_errors import redis_errors
from pipeline.search import Searcher
from pipeline.search_models import SearchQuery, SearchResult

SLOT_LAPSE_S = 60.0
"""How long a slot is held at most: a search that long is over (Elasticsearch's own timeout
is shorter), and a slot whose process died is free again by then."""


class SearchSlots:
    """The search slots of every tenant: ``per_tenant`` each (0: no limit)."""

    def __init__(self, client: redis.Redis, namespace: str, per_tenant: int) -> None:
        self.client = client
        self.prefix = f"memq:{namespace}:searching"
        self.per_tenant = per_tenant
        self.script = client.register_script(files("api").joinpath("search_slots.lua").read_text())
        self.local: Counter[str] = Counter()  # this process's slots, while Redis is down
        self.lock = threading.Lock()

    @contextmanager
    def holding(self, tenant: str) -> Iterator[None]:
        """One of ``tenant``'s slots for the duration of the block; ``RateLimitedError`` (429)
        when all are taken."""
        if not self.per_tenant:
            yield
            return
        token = uuid.uuid4().hex
        try:
            shared = self._take(tenant, token)
        except TransientError:  # Redis is down: count this process's own
            shared = False
            self._take_local(tenant)
        try:
            yield
        finally:
            self._give_back(tenant, token) if shared else self._give_back_local(tenant)

    def _take(self, tenant: str, token: str) -> bool:
        now_ms = int(time.time() * 1000)
        lapse_ms = now_ms + int(SLOT_LAPSE_S * 1000)
        with redis_errors("take a search slot"):
            answer = self.script(
                keys=[self._key(tenant)], args=[now_ms, lapse_ms, token, self.per_tenant]
            )
        if int(answer) != 1:
            self._refuse()
        return True

    def _give_back(self, tenant: str, token: str) -> None:
        try:
            with redis_errors("give back a search slot"):
                self.client.zrem(self._key(tenant), token)
        except TransientError:
            pass  # the slot lapses on its own (SLOT_LAPSE_S)

    def _take_local(self, tenant: str) -> None:
        with self.lock:
            if self.local[tenant] >= self.per_tenant:
                self._refuse()
            self.local[tenant] += 1

    def _give_back_local(self, tenant: str) -> None:
        with self.lock:
            self.local[tenant] -= 1

    def _refuse(self) -> None:
        # imported here: api.limits declares route dependencies on api.deps, which imports us
        from api.limits import RateLimitedError

        raise RateLimitedError(
            f"this tenant already has {self.per_tenant} searches running, its share of the "
            "search threads every tenant uses: send the next one when one has answered",
            1,  # a search answers in well under a second: the shortest Retry-After there is
        )

    def _key(self, tenant: str) -> str:
        return f"{self.prefix}:{tenant}"


class FairSearcher:
    """The API's searcher: ``Searcher``'s reported searches, each inside one of its tenant's
    slots. Every surface (REST, mem0's routes, MCP, the explorer) searches through it."""

    def __init__(self, searcher: Searcher, slots: SearchSlots) -> None:
        self.searcher = searcher
        self.slots = slots

    def search_reported(self, query: SearchQuery) -> SearchResult:
        with self.slots.holding(query.scope.tenant):
            return self.searcher.search_reported(query)

    def search_many_reported(self, queries: Sequence[SearchQuery]) -> list[SearchResult]:
        tenants = {q.scope.tenant for q in queries}
        if len(tenants) != 1:  # one request is one tenant's; an empty batch searches nothing
            return self.searcher.search_many_reported(queries)
        with self.slots.holding(tenants.pop()):
            return self.searcher.search_many_reported(queries)
