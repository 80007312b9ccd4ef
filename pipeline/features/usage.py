"""What each tenant uses, per day (UTC), and the optional monthly token budget that caps it.

Glossary:
- **usage**: the figures of ``Usage`` — jobs ended (``jobs``, of which ``failed_jobs`` failed
  or dead), memories stored, LLM tokens (``prompt_tokens``, ``completion_tokens``) and calls,
  and ``embeddings``: texts embedded for the jobs (their facts, and the new turn retrieval
  searches with). The model calls themselves are shared by a batch's jobs, so a tenant's share
  is counted in texts, not calls.
- **charge**: one ended run of a job (``job_id`` + ``attempts``) adding the counts of its final
  record to its tenant's day, month and all-time totals. A charge is applied once whatever
  redelivers it (``charge_id``): a finalize run twice, a failure recorded again after an
  outage. A replayed job is a new attempt and is charged again for what that attempt used.
- **day**: the UTC day the run ended (``finished_at``): tokens are spent while a job runs.
- **budget**: a tenant's monthly cap on LLM tokens (prompt + completion), set by an admin.
  Once the month's tokens reach it, extraction is refused at the intake (``BudgetSpentError``,
  a 429 until the month ends) and jobs already accepted fail in extract with the same reason;
  adds without the LLM (``infer=false``) still run. Raising or clearing it works at once.

Jobs are charged when their result is final, so the tokens of jobs still running are not yet
in the month's total: a burst accepted just under the budget may end a little over it.

``UsageLedger`` is where the figures live (``pipeline.features.usage_redis.RedisUsage`` in Redis,
whose AOF keeps them across restarts; ``InMemoryUsage`` in process, same rules).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import AddRequest
from pipeline.errors import InvalidInputError, PermanentError, TransientError
from pipeline.ingestion.capability import llm_need

log = logging.getLogger("memq.usage")


class Usage(BaseModel):
    """What a tenant used over some span; every figure a count."""

    model_config = ConfigDict(frozen=True)

    jobs: int = 0
    failed_jobs: int = 0
    memories: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    embeddings: int = 0

    @property
    def tokens(self) -> int:
        """Prompt and completion tokens together: what the budget counts."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage.of({k: v + getattr(other, k) for k, v in self.fields().items()})

    def fields(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name in USAGE_FIELDS}

    @classmethod
    def of(cls, values: Mapping[str, int | str | bytes]) -> Usage:
        """From a mapping of field names to counts (Redis answers bytes); other keys are
        ignored, absent ones are 0."""
        return cls(**{name: int(values[name]) for name in USAGE_FIELDS if name in values})


USAGE_FIELDS: tuple[str, ...] = tuple(Usage.model_fields)


@dataclass(frozen=True)
class Charge:
    """One ended run of a job, to add to its tenant's figures (see the glossary)."""

    charge_id: str
    tenant: str
    day: date
    usage: Usage


def charge_of(record: JobRecord) -> Charge:
    """The charge of a job's final record (``succeeded``, ``failed`` or ``dead``)."""
    counts = record.counts
    failed = record.status is not JobStatus.SUCCEEDED
    usage = Usage(
        jobs=1,
        failed_jobs=int(failed),
        memories=counts.get("stored", 0),
        prompt_tokens=counts.get("prompt_tokens", 0),
        completion_tokens=counts.get("completion_tokens", 0),
        llm_calls=counts.get("llm_calls", 0),
        embeddings=counts.get("embedded", 0),
    )
    ended = record.finished_at or record.updated_at
    return Charge(f"{record.job_id}:{record.attempts}", record.tenant, utc_day(ended), usage)


def utc_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def month_of(day: date) -> str:
    """``YYYY-MM``: the key of a month's totals."""
    return day.strftime("%Y-%m")


def next_month(day: date) -> datetime:
    """Midnight UTC on the first day of the month after ``day``'s."""
    first = day.replace(day=1) + timedelta(days=32)
    return datetime(first.year, first.month, 1, tzinfo=UTC)


@dataclass(frozen=True)
class DayUsage:
    day: date
    usage: Usage


@dataclass(frozen=True)
class BudgetState:
    """A tenant's budget (None: no cap) and the tokens of its month so far."""

    budget: int | None
    month_tokens: int

    @property
    def spent(self) -> bool:
        return self.budget is not None and self.month_tokens >= self.budget


@runtime_checkable
class UsageLedger(Protocol):
    """Where per-tenant usage and budgets are kept. Failures of the storage raise
    ``TransientError``."""

    def charge(self, charges: Sequence[Charge]) -> int:
        """Apply each charge not applied before (by ``charge_id``); returns how many were."""
        ...

    def days(self, tenant: str, first: date, last: date) -> list[DayUsage]:
        """The tenant's usage on each day from ``first`` to ``last`` (inclusive), in order;
        a day with nothing is all zeros."""
        ...

    def totals(self) -> dict[str, Usage]:
        """Every tenant's usage since usage was first counted."""
        ...

    def budget_state(self, tenant: str, month: str) -> BudgetState:
        """The tenant's budget and its tokens in ``month`` (``YYYY-MM``), read together."""
        ...

    def budgets(self) -> dict[str, int]:
        """Every tenant's budget that is set."""
        ...

    def set_budget(self, tenant: str, tokens: int | None) -> None:
        """Set the tenant's monthly token budget; None removes it."""
        ...


class BudgetSpentError(PermanentError):
    """The tenant's monthly token budget is spent: extraction is refused until the month ends
    (``retry_after_s``) or an admin raises the budget."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.retry_after_s = max(1, retry_after_s)


def check_budget(ledger: UsageLedger | None, tenant: str, now: datetime) -> None:
    """Return when ``tenant`` may spend LLM tokens now; raise ``BudgetSpentError`` naming the
    budget, what the month used, and how to go on, when its monthly budget is spent."""
    if ledger is None:
        return
    today = utc_day(now)
    month = month_of(today)
    state = ledger.budget_state(tenant, month)
    if not state.spent:
        return
    resets = next_month(today)
    raise BudgetSpentError(
        f"tenant {tenant}'s monthly token budget of {state.budget} is spent "
        f"({state.month_tokens} tokens used in {month}): extraction is refused until "
        f"{resets.date().isoformat()} or until an admin raises the budget "
        f"(PUT /v1/admin/budgets/{tenant}); infer=false adds still work",
        retry_after_s=int((resets - now).total_seconds()),
    )


def check_spendable(
    request: AddRequest,
    vision: bool,
    ledger: UsageLedger | None,
    now: datetime,
    *,
    at_intake: bool = False,
) -> None:
    """``check_budget`` for an add that needs the LLM (``pipeline.ingestion.capability.llm_need``:
    to extract facts, write a procedural summary or describe images); an add that does not is
    never refused for the budget. ``at_intake``: a ledger that cannot be read (Redis down)
    lets the add through, since the intake accepts while either store is up and extract checks
    again before the model is called; elsewhere its ``TransientError`` is raised."""
    if llm_need(request, vision) is None:
        return
    try:
        check_budget(ledger, request.scope.tenant, now)
    except TransientError as exc:
        if not at_intake:
            raise
        log.warning("token budget of %s unread at the intake (%s)", request.scope.tenant, exc)


def days_between(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


@dataclass
class InMemoryUsage:
    """``UsageLedger`` in this process: the same rules as the Redis one, for tests and the
    in-process facade."""

    by_day: dict[tuple[str, date], Usage] = field(default_factory=dict)
    applied: set[str] = field(default_factory=set)
    caps: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def charge(self, charges: Sequence[Charge]) -> int:
        applied = 0
        with self.lock:
            for charge in charges:
                if charge.charge_id in self.applied:
                    continue
                self.applied.add(charge.charge_id)
                key = (charge.tenant, charge.day)
                self.by_day[key] = self.by_day.get(key, Usage()) + charge.usage
                applied += 1
        return applied

    def days(self, tenant: str, first: date, last: date) -> list[DayUsage]:
        return [
            DayUsage(day, self.by_day.get((tenant, day), Usage()))
            for day in days_between(first, last)
        ]

    def totals(self) -> dict[str, Usage]:
        out: dict[str, Usage] = {}
        for (tenant, _), usage in self.by_day.items():
            out[tenant] = out.get(tenant, Usage()) + usage
        return out

    def budget_state(self, tenant: str, month: str) -> BudgetState:
        tokens = sum(
            u.tokens for (t, d), u in self.by_day.items() if t == tenant and month_of(d) == month
        )
        return BudgetState(self.caps.get(tenant), tokens)

    def budgets(self) -> dict[str, int]:
        return dict(self.caps)

    def set_budget(self, tenant: str, tokens: int | None) -> None:
        if tokens is None:
            self.caps.pop(tenant, None)
        else:
            self.caps[tenant] = tokens


MAX_REPORT_DAYS = 366


@dataclass(frozen=True)
class UsageReport:
    """A tenant's usage over ``first``..``last`` (UTC days, inclusive): each day, their sum,
    and its budget with the current month's tokens."""

    tenant: str
    first: date
    last: date
    days: list[DayUsage]
    total: Usage
    budget: BudgetState
    month: str


def usage_report(
    ledger: UsageLedger, tenant: str, first: date | None, last: date | None, now: datetime
) -> UsageReport:
    """The report of ``tenant`` from ``first`` (default: the first of this month) to ``last``
    (default: today). Raises ``InvalidInputError`` for a span that ends before it starts or
    covers more than ``MAX_REPORT_DAYS``."""
    today = utc_day(now)
    last = last or today
    first = first or last.replace(day=1)
    if first > last:
        raise InvalidInputError(f"from ({first}) is after to ({last})", field="from")
    if (last - first).days + 1 > MAX_REPORT_DAYS:
        raise InvalidInputError(
            f"a report covers at most {MAX_REPORT_DAYS} days; ask for a shorter span",
            field="from",
        )
    days = ledger.days(tenant, first, last)
    total = sum((d.usage for d in days), Usage())
    month = month_of(today)
    return UsageReport(tenant, first, last, days, total, ledger.budget_state(tenant, month), month)


OTHER_TENANTS = "_other"
"""The tenant label of the tenants past a metrics cap, summed (no tenant's name starts with _)."""


def capped(totals: Mapping[str, Usage], limit: int) -> dict[str, Usage]:
    """``totals`` with at most ``limit`` tenants by name: those with the most tokens (then the
    most jobs; ties by name), and the rest summed under ``OTHER_TENANTS``. Bounds the series a
    metrics scrape exposes, whatever the number of tenants."""
    ranked = sorted(totals, key=lambda t: (-totals[t].tokens, -totals[t].jobs, t))
    kept = {tenant: totals[tenant] for tenant in ranked[:limit]}
    rest = ranked[limit:]
    if rest:
        kept[OTHER_TENANTS] = sum((totals[t] for t in rest), Usage())
    return kept
