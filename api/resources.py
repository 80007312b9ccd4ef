"""What the API serves requests with, built from ``Settings`` when the app is built: the
serving ``Services`` (store, keys, search, the phases' dependencies, clock), the intake that
hands work to the workers, and the Redis client of the tenant limits. Request handlers reach
them through the typed dependencies of ``api.deps``; the MCP server uses the same bundle.

Nothing here connects at build time: each client is made, or connects, on first use, so the
app (and ``memq openapi``) builds with Elasticsearch and Redis down.

``worker_intake`` is the one place ``api`` names ``workers``: the API's default intake is the
Celery one, and importing it loads Celery, so it is imported when the first request that
queues work arrives, never when the app is built. A caller may hand ``Resources`` any other
``Intake`` (a test, or an embedding application with its own queue).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

import redis

from pipeline.config import Settings
from pipeline.features.usage_redis import RedisUsage
from pipeline.ingestion.intake import Intake
from pipeline.services import Services

if TYPE_CHECKING:
    from api.limits import TenantLimits
    from api.search_slots import FairSearcher

IntakeFactory = Callable[[Settings], Intake]


def worker_intake(settings: Settings) -> Intake:
    """The Celery-backed intake of ``workers`` (see the module's docstring for why here)."""
    from workers.serving import celery_intake

    return celery_intake(settings)


class Resources:
    """The API's per-process resources for ``settings``. ``intake`` is an ``Intake``, or a
    factory called with the settings on first use (``worker_intake`` when omitted)."""

    def __init__(
        self,
        settings: Settings,
        intake: Intake | IntakeFactory | None = None,
        services: Services | None = None,
    ) -> None:
        self.settings = settings
        # a GET of an unknown id forces at most one index refresh per second (the index's own
        # interval): tenants' requests must not make the cluster refresh at their will
        self.services = services or Services(settings, miss_refresh_interval_s=1.0)
        self._intake: Intake | None = intake if isinstance(intake, Intake) else None
        self._make_intake: IntakeFactory = worker_intake
        if intake is not None and not isinstance(intake, Intake):
            self._make_intake = intake
        self._lock = threading.Lock()

    @property
    def intake(self) -> Intake:
        """The intake, built by the first caller (requests run in threads: built once)."""
        if self._intake is None:
            with self._lock:
                if self._intake is None:
                    self._intake = self._make_intake(self.settings)
        return self._intake

    @cached_property
    def redis(self) -> redis.Redis:
        """The API's own Redis client (tenant limits, readiness, queue depths); connects on
        first command."""
        return redis.Redis.from_url(self.settings.redis.url)

    @cached_property
    def usage(self) -> RedisUsage:
        """Per-tenant usage and budgets (``pipeline.features.usage``), in the API's Redis."""
        return RedisUsage(self.redis, self.settings.es.index_prefix)

    @cached_property
    def limits(self) -> TenantLimits:
        """The per-tenant limits every surface (routes and MCP tools) charges."""
        # imported here: api.limits declares route dependencies on api.deps, which imports us
        from api.limits import TenantLimits

        settings = self.settings
        return TenantLimits(settings.api, self.redis, settings.redis.url, settings.es.index_prefix)

    @cached_property
    def searcher(self) -> FairSearcher:
        """The searcher every surface uses: each search inside its tenant's slots, charged its
        costly search work."""
        from api.search_slots import FairSearcher, SearchSlots

        per_tenant = self.settings.api.search_slots_per_tenant
        wait_s = self.settings.api.search_slot_wait_s
        slots = SearchSlots(self.redis, self.settings.es.index_prefix, per_tenant, wait_s)
        candidates = self.settings.search.rerank_candidates
        return FairSearcher(self.services.searcher, slots, self.limits, candidates)
