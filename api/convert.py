"""Between HTTP bodies and memq's domain models."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from api.errors import location, most_specific
from api.schemas import (
    BudgetPublic,
    DayUsagePublic,
    Include,
    JobPublic,
    MemoryCreate,
    MemoryDetail,
    MemoryEvent,
    MemoryPublic,
    ShardsPublic,
    UsagePublic,
    UsageReportPublic,
)
from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord, public_results
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.errors import InvalidInputError
from pipeline.features.provenance import provenance_of
from pipeline.features.usage import BudgetState, Usage, UsageReport
from pipeline.ingestion.capability import refusal
from pipeline.serving.keys import Principal
from pipeline.serving.search_models import Shards
from pipeline.store.filters import split_scope
from pipeline.store.protocol import ServingStore
from pipeline.store.reads import MemoryRecord

_MESSAGES = TypeAdapter(list[MessageIn])
FILTERS_MAX_CHARS = 10_000
FILTERS_MAX_DEPTH = 32
# Python's parser recurses on chains of operators: past a few thousand characters of them it
# raises MemoryError or RecursionError, so literals are read from a shorter text only
LITERAL_MAX_CHARS = 2_000
_QUOTED = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'""", re.DOTALL)


def scope_of(
    principal: Principal, user_id: str | None, agent_id: str | None, run_id: str | None
) -> Scope:
    """The caller's tenant with the given ids; at least one id is required."""
    if user_id is None and agent_id is None and run_id is None:
        raise InvalidInputError("give at least one of user_id, agent_id, run_id", field="user_id")
    return Scope(tenant=principal.tenant, user_id=user_id, agent_id=agent_id, run_id=run_id)


def scope_from_filters(filters: Any) -> dict[str, str]:
    """user_id / agent_id / run_id equalities at the top of a filter (or in a top AND), where
    mem0 2.x callers put the scope (``pipeline.store.filters.split_scope``)."""
    return split_scope(filters).ids


def split_filters(
    principal: Principal, filters: Any, given: Mapping[str, str | None] | None = None
) -> tuple[Scope, dict[str, Any] | None]:
    """The scope named by ``given`` ids and/or by ids inside ``filters``, and the rest of the
    filter (every condition kept). An id named both ways must agree (``InvalidInputError``
    otherwise)."""
    split = split_scope(filters)
    ids = split.ids
    for key, value in (given or {}).items():
        if value is not None and ids.setdefault(key, value) != value:
            raise InvalidInputError(f"{key} differs between the body and its filters", field=key)
    scope = scope_of(principal, ids.get("user_id"), ids.get("agent_id"), ids.get("run_id"))
    return scope, split.rest


def filters_param(raw: str, literals: bool = False) -> Any:
    """A ``filters`` query parameter: JSON, or with ``literals`` a Python literal (the mem0
    client writes a dict parameter as its ``repr``), read by ``ast.literal_eval``, which
    evaluates literals only. Bounded before either parser runs (both recurse):
    ``FILTERS_MAX_CHARS``, ``FILTERS_MAX_DEPTH`` brackets, ``LITERAL_MAX_CHARS`` for a
    literal. ``InvalidInputError`` (422) naming the limit, or saying it cannot be read."""
    if len(raw) > FILTERS_MAX_CHARS:
        raise InvalidInputError(
            f"filters is longer than {FILTERS_MAX_CHARS} characters", field="filters"
        )
    if nesting_depth(raw) > FILTERS_MAX_DEPTH:
        raise InvalidInputError(
            f"filters is nested deeper than {FILTERS_MAX_DEPTH} levels", field="filters"
        )
    try:
        return json.loads(raw)
    except ValueError as exc:
        if not literals:
            raise InvalidInputError("filters is not valid JSON", field="filters") from exc
    return python_literal(raw)


def python_literal(raw: str) -> Any:
    if len(raw) > LITERAL_MAX_CHARS:
        raise InvalidInputError(
            f"filters is not JSON, and a Python literal is read up to {LITERAL_MAX_CHARS} "
            "characters only",
            field="filters",
        )
    try:
        return ast.literal_eval(raw)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        raise InvalidInputError(
            "filters is neither JSON nor a Python literal", field="filters"
        ) from exc


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``, ``{`` and ``(`` outside quoted strings (JSON's and
    Python's quotes, with backslash escapes), without recursion."""
    depth = deepest = 0
    for char in _QUOTED.sub("", text):
        if char in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]})":
            depth = max(depth - 1, 0)  # a stray closer must not hide the openers after it
    return deepest


def messages_of(raw: str | dict[str, Any] | list[dict[str, Any]]) -> list[MessageIn]:
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    elif isinstance(raw, dict):
        raw = [raw]
    if not raw:
        raise InvalidInputError("messages is empty", field="messages")
    try:
        return _MESSAGES.validate_python(raw)
    except ValidationError as exc:
        chosen = most_specific(exc.errors())
        where = location(("messages", *chosen["loc"]))
        raise InvalidInputError(f"{where}: {chosen['msg']}", field=where) from exc


def add_request(body: MemoryCreate, principal: Principal) -> AddRequest:
    """Validate a create body into an ``AddRequest`` (pydantic errors name the field)."""
    timestamp = body.timestamp
    if isinstance(timestamp, int):
        timestamp = from_unix(timestamp)
    return AddRequest(
        scope=scope_of(principal, body.user_id, body.agent_id, body.run_id),
        messages=messages_of(body.messages),
        metadata=body.metadata or {},
        infer=body.infer,
        memory_type=body.memory_type,
        prompt=body.prompt,
        timestamp=timestamp,
        expiration_date=body.expiration_date,
        webhook_url=body.webhook_url,
        actor_id=body.actor_id,
    )


def batch_requests(
    items: Sequence[MemoryCreate], principal: Principal, settings: Settings
) -> list[AddRequest]:
    """Every item of a batch validated, and checked runnable under ``settings``
    (``pipeline.ingestion.capability``), before any is queued: ``InvalidInputError`` names the
    item."""
    requests = [add_request(item, principal) for item in items]
    for index, request in enumerate(requests):
        refused = refusal(request, settings)
        if refused is not None:
            where = f"items.{index}"
            raise InvalidInputError(f"{where}: {refused.reason}", f"{where}.{refused.field}")
    return requests


def from_unix(seconds: int) -> datetime:
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise InvalidInputError(
            f"timestamp {seconds} is not a usable Unix time", field="timestamp"
        ) from exc


def job_public(record: JobRecord) -> JobPublic:
    results = [MemoryEvent.model_validate(r) for r in public_results(record.results)]
    return JobPublic(
        **record.model_dump(exclude={"results", "request", "tenant", "session_key"}),
        results=results,
    )


def memory_public(memory: MemoryRecord) -> MemoryPublic:
    """A memory read by id as the API shows it."""
    return MemoryPublic.from_record(memory)


def memory_detail(
    store: ServingStore, memory: MemoryRecord, include: Sequence[Include] | None
) -> MemoryDetail:
    """A memory read by id, with its provenance when ``include`` names ``sources``."""
    provenance = provenance_of(store, memory) if include and "sources" in include else None
    return MemoryDetail.from_record(memory, provenance=provenance)


def shards_public(shards: Shards) -> ShardsPublic:
    """How much of the index answered a search, as the API documents it."""
    return ShardsPublic.model_validate(shards, from_attributes=True)


def usage_public(usage: Usage) -> dict[str, int]:
    return {**usage.fields(), "tokens": usage.tokens}


def budget_public(tenant: str, state: BudgetState, month: str) -> BudgetPublic:
    return BudgetPublic(
        tenant=tenant,
        monthly_tokens=state.budget,
        month=month,
        month_tokens=state.month_tokens,
        spent=state.spent,
    )


def report_public(report: UsageReport) -> UsageReportPublic:
    return UsageReportPublic.model_validate(
        {
            "tenant": report.tenant,
            "from": report.first,
            "to": report.last,
            "total": UsagePublic(**usage_public(report.total)),
            "days": [DayUsagePublic(day=d.day, **usage_public(d.usage)) for d in report.days],
            "budget": budget_public(report.tenant, report.budget, report.month),
        }
    )
