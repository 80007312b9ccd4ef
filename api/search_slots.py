"""How much searching one tenant may have running at once, across API processes.

A search costs Elasticsearch CPU in proportion to its filters and the shard's size, and the
node's search threads are shared by every tenant: a tenant within its searches per second could
still keep every thread busy with costly ones, and every other tenant's searches queued behind
them. So each tenant has ``MEMQ_API_SEARCH_SLOTS_PER_TENANT`` slots (0: no limit), and a search
takes as many as it weighs (``pipeline.store.filters.search_slots``: 1 for a plain search, up to 4
for the costliest filter allowed). A plain search that finds its slot taken waits for it,
polling, up to ``MEMQ_API_SEARCH_SLOT_WAIT_S`` (a burst of one tenant's searches queues behind
its own running ones, as it would in Elasticsearch's queue, but never ahead of another
tenant's), and is then answered with 429 and a ``Retry-After`` that says why; a heavier search
is answered so at once (a flood of costly searches then leaves gaps other tenants use, where
waiting would keep one of them always running). The wait is bounded because a
waiting request holds an API thread. A search heavier than all the slots runs when nothing else
of its tenant runs.

Glossary: a *slot* is a unit of one tenant's running searches, held in the Redis sorted set
``memq:{namespace}:searching:{tenant}`` as ``token:slots`` members scored with their *lapse*
time: the slots of a search whose API process died are given back when they lapse
(``SLOT_LAPSE_S``). Taking them is one Lua script (``search_slots.lua``), so two processes
never both take the last ones. While Redis cannot be reached, each process counts its own:
the limit still holds per process.

A batch search takes the slots of its heaviest query: its queries run in the same two
Elasticsearch round trips, and the searches-per-second limit already charges each of them.

Slots bound how much of a tenant's searching runs at once, not how often: a tenant whose
costly searches each take all its slots still ran one after the other, back to back, and took
that share of the CPU every tenant shares. So ``FairSearcher`` also charges each search's
units of costly search work (``pipeline.serving.search_cost``: 0 for a plain search) against its
tenant's budget per second (``MEMQ_API_SEARCH_COST_PER_S``, ``api/limits.py``), once it holds
its slots (a search refused for its slots spends none); a batch search charges the sum of its
queries'.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import redis

from pipeline.adapters.redis_errors import redis_errors
from pipeline.adapters.redis_scripts import register
from pipeline.errors import TransientError
from pipeline.serving.search import Searcher
from pipeline.serving.search_cost import search_cost
from pipeline.serving.search_models import SearchQuery, SearchResult
from pipeline.store.filters import search_slots

if TYPE_CHECKING:  # api.limits declares route dependencies on api.deps, which imports us
    from api.limits import TenantLimits

SLOT_LAPSE_S = 60.0
"""How long slots are held at most: a search that long is over (Elasticsearch's own timeout
is shorter), and the slots of a search whose process died are free again by then."""


class SearchSlots:
    """The search slots of every tenant: ``per_tenant`` each (0: no limit)."""

    def __init__(
        self, client: redis.Redis, namespace: str, per_tenant: int, wait_s: float = 0.0
    ) -> None:
        self.client = client
        self.prefix = f"memq:{namespace}:searching"
        self.per_tenant = per_tenant
        self.wait_s = wait_s
        self.script = register(client, "api", "search_slots")
        self.local: Counter[str] = Counter()  # this process's slots, while Redis is down
        self.lock = threading.Lock()

    @contextmanager
    def holding(self, tenant: str, slots: int = 1) -> Iterator[None]:
        """``slots`` of ``tenant``'s slots for the duration of the block, waited for up to
        ``wait_s``; ``RateLimitedError`` (429) when too few were free by then."""
        if not self.per_tenant:
            yield
            return
        member = f"{uuid.uuid4().hex}:{slots}"
        # a plain search queues behind its tenant's own; a heavier one does not wait: refused
        # while its tenant's slots are taken, a flood of costly searches leaves gaps that other
        # tenants' searches use, instead of keeping one always running
        deadline = time.monotonic() + (self.wait_s if slots == 1 else 0.0)
        pause_s = 0.005
        while True:
            try:
                shared = True
                if self._take(tenant, member, slots):
                    break
            except TransientError:  # Redis is down: count this process's own
                shared = False
                if self._take_local(tenant, slots):
                    break
            if time.monotonic() + pause_s > deadline:
                self._refuse()
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.05)
        try:
            yield
        finally:
            self._give_back(tenant, member) if shared else self._give_back_local(tenant, slots)

    def _take(self, tenant: str, member: str, slots: int) -> bool:
        now_ms = int(time.time() * 1000)
        lapse_ms = now_ms + int(SLOT_LAPSE_S * 1000)
        with redis_errors("take search slots"):
            answer = self.script(
                keys=[self._key(tenant)], args=[now_ms, lapse_ms, member, slots, self.per_tenant]
            )
        return int(answer) == 1

    def _give_back(self, tenant: str, member: str) -> None:
        try:
            with redis_errors("give back search slots"):
                self.client.zrem(self._key(tenant), member)
        except TransientError:
            pass  # the slots lapse on their own (SLOT_LAPSE_S)

    def _take_local(self, tenant: str, slots: int) -> bool:
        with self.lock:
            held = self.local[tenant]
            if held and held + slots > self.per_tenant:
                return False
            self.local[tenant] += slots
            return True

    def _give_back_local(self, tenant: str, slots: int) -> None:
        with self.lock:
            self.local[tenant] -= slots

    def _refuse(self) -> None:
        # imported here: api.limits declares route dependencies on api.deps, which imports us
        from api.limits import RateLimitedError

        raise RateLimitedError(
            f"this tenant's searches already hold its {self.per_tenant} search slots (a search "
            "with substring filters or long in/nin lists takes more than one), its share of the "
            f"search threads every tenant uses, for {self.wait_s:g} s: send the next one when "
            "one has answered",
            1,  # a search answers in well under a second: the shortest Retry-After there is
        )

    def _key(self, tenant: str) -> str:
        return f"{self.prefix}:{tenant}"


class FairSearcher:
    """The API's searcher: ``Searcher``'s reported searches, each holding its tenant's slots
    and charged its units of costly search work to ``limits``. Every surface (REST, mem0's
    routes, MCP, the explorer) searches through it."""

    def __init__(
        self,
        searcher: Searcher,
        slots: SearchSlots,
        limits: TenantLimits,
        rerank_candidates: int,
    ) -> None:
        self.searcher = searcher
        self.slots = slots
        self.limits = limits
        self.rerank_candidates = rerank_candidates

    def search_reported(self, query: SearchQuery) -> SearchResult:
        with self.slots.holding(query.scope.tenant, search_slots(query.filters)):
            self._charge(query.scope.tenant, [query])
            return self.searcher.search_reported(query)

    def search_many_reported(self, queries: Sequence[SearchQuery]) -> list[SearchResult]:
        tenants = {q.scope.tenant for q in queries}
        if len(tenants) != 1:  # one request is one tenant's; an empty batch searches nothing
            return self.searcher.search_many_reported(queries)
        tenant = tenants.pop()
        heaviest = max(search_slots(q.filters) for q in queries)
        with self.slots.holding(tenant, heaviest):
            self._charge(tenant, queries)
            return self.searcher.search_many_reported(queries)

    def _charge(self, tenant: str, queries: Sequence[SearchQuery]) -> None:
        """``RateLimitedError`` (429) when ``tenant`` has spent its costly search work."""
        cost = sum(search_cost(q, self.rerank_candidates) for q in queries)
        if cost:
            self.limits.charge(tenant, "search_cost", cost)
