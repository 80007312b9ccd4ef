"""``UsageLedger`` in Redis (``pipeline.features.usage`` has the rules and the glossary).

Keys, under ``memq:{namespace}:usage`` (the index prefix, so deployments and test runs sharing
a Redis stay apart):
- ``day:{tenant}:{YYYY-MM-DD}``, ``month:{tenant}:{YYYY-MM}``, ``total:{tenant}``: hashes of
  the ``Usage`` fields, added to by one script per charge (``usage_charge.lua``); kept for
  good (a few hundred bytes a tenant a day);
- ``tenants``: the set of tenants ever charged (what ``/metrics`` reads);
- ``charged:{job_id}:{attempts}``: the mark of an applied charge, kept ``CHARGED_TTL_S`` (as
  long as a job's state may live, so any redelivery of its end meets the mark);
- ``budgets``: a hash, tenant → monthly token budget.
Redis with AOF (as ``ops/`` and compose run it) keeps them across restarts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date

import redis

from pipeline.adapters.redis_errors import redis_errors
from pipeline.adapters.redis_scripts import register
from pipeline.features.usage import BudgetState, Charge, DayUsage, Usage, days_between, month_of

CHARGED_TTL_S = 8 * 86_400  # longer than a job state's 7 days (``workers.scheduler.state_store``)


class RedisUsage:
    """Per-tenant usage and budgets in Redis (see the module's docstring)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.prefix = f"memq:{namespace}:usage"
        self._charge = register(client, "pipeline.features", "usage_charge")

    def _day(self, tenant: str, day: date) -> str:
        return f"{self.prefix}:day:{tenant}:{day.isoformat()}"

    def _month(self, tenant: str, month: str) -> str:
        return f"{self.prefix}:month:{tenant}:{month}"

    def _total(self, tenant: str) -> str:
        return f"{self.prefix}:total:{tenant}"

    @property
    def _tenants(self) -> str:
        return f"{self.prefix}:tenants"

    @property
    def _budgets(self) -> str:
        return f"{self.prefix}:budgets"

    def _keys(self, charge: Charge) -> list[str]:
        return [
            f"{self.prefix}:charged:{charge.charge_id}",
            self._day(charge.tenant, charge.day),
            self._month(charge.tenant, month_of(charge.day)),
            self._total(charge.tenant),
            self._tenants,
        ]

    def charge(self, charges: Sequence[Charge]) -> int:
        if not charges:
            return 0
        with redis_errors("charge usage"):
            pipe = self.client.pipeline(transaction=False)
            for charge in charges:
                pairs = [x for item in charge.usage.fields().items() for x in item]
                args = [CHARGED_TTL_S, charge.tenant, *pairs]
                self._charge(keys=self._keys(charge), args=args, client=pipe)
            return sum(int(applied) for applied in pipe.execute())

    def days(self, tenant: str, first: date, last: date) -> list[DayUsage]:
        span = days_between(first, last)
        with redis_errors("read usage"):
            pipe = self.client.pipeline(transaction=False)
            for day in span:
                pipe.hgetall(self._day(tenant, day))
            found = pipe.execute()
        return [DayUsage(day, Usage.of(decoded(h))) for day, h in zip(span, found, strict=True)]

    def totals(self) -> dict[str, Usage]:
        with redis_errors("read usage"):
            tenants = sorted(text(m) for m in self.client.smembers(self._tenants))
            pipe = self.client.pipeline(transaction=False)
            for tenant in tenants:
                pipe.hgetall(self._total(tenant))
            found = pipe.execute()
        return {t: Usage.of(decoded(h)) for t, h in zip(tenants, found, strict=True)}

    def budget_state(self, tenant: str, month: str) -> BudgetState:
        with redis_errors("read the token budget"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(self._budgets, tenant)
            pipe.hmget(self._month(tenant, month), "prompt_tokens", "completion_tokens")
            budget, tokens = pipe.execute()
        return BudgetState(
            int(budget) if budget is not None else None, sum(int(t or 0) for t in tokens)
        )

    def budgets(self) -> dict[str, int]:
        with redis_errors("read token budgets"):
            found = self.client.hgetall(self._budgets)
        return {tenant: int(tokens) for tenant, tokens in decoded(found).items()}

    def set_budget(self, tenant: str, tokens: int | None) -> None:
        with redis_errors("set the token budget"):
            if tokens is None:
                self.client.hdel(self._budgets, tenant)
            else:
                self.client.hset(self._budgets, tenant, str(tokens))


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def decoded(found: Mapping[bytes | str, bytes | str]) -> dict[str, str]:
    return {text(key): text(value) for key, value in found.items()}
