"""What mem0's hosted client asks of a platform beyond memories themselves: the list of a
tenant's users, agents and runs ("entities"), the deletion of one, and feedback on a memory.

Glossary (mem0's words, memq's things):
- entity: a user, agent or run that has memories in the tenant (``ScopeKind``); memq has no
  apps, so mem0's ``app`` entity names nothing here.
- feedback: a caller's verdict on one memory (``Feedback``) with an optional reason, kept on the
  memory itself. It is recorded and shown on reads; search does not use it (yet).

Every function takes the tenant from the caller's key and never reads another tenant's data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pipeline.domain.models import Scope
from pipeline.errors import InvalidInputError
from pipeline.features.explorer import ScopeKind
from pipeline.serving import crud
from pipeline.serving.listing import delete_all
from pipeline.store.protocol import ServingStore
from pipeline.store.reads import MemoryRecord

ENTITY_PAGE = 1000  # buckets per composite-aggregation page
MAX_FEEDBACK_REASON_CHARS = 2000

# mem0's entity type -> the memory field that holds its id
ENTITY_KINDS = {"user": ScopeKind.USER, "agent": ScopeKind.AGENT, "run": ScopeKind.RUN}


@dataclass(frozen=True)
class Entity:
    """One user, agent or run of a tenant: how many memories it has, and when the first was
    written and the last changed."""

    kind: str  # "user", "agent" or "run"
    name: str
    memories: int
    created_at: datetime | None
    updated_at: datetime | None


def entity_kind(kind: str) -> ScopeKind:
    """The scope field of mem0's entity type; ``InvalidInputError`` for ``app`` and others."""
    try:
        return ENTITY_KINDS[kind]
    except KeyError:
        known = ", ".join(ENTITY_KINDS)
        raise InvalidInputError(
            f"memq has no {kind!r} entities: the kinds are {known}", field="entity_type"
        ) from None


def list_entities(store: ServingStore, tenant: str) -> list[Entity]:
    """Every user, then every agent, then every run with memories in ``tenant`` (all of them:
    a composite aggregation read page by page, so ``reset`` can delete each one)."""
    return [e for kind in ENTITY_KINDS for e in entities_of_kind(store, tenant, kind)]


def entities_of_kind(store: ServingStore, tenant: str, kind: str) -> Iterator[Entity]:
    after: dict[str, Any] | None = None
    while True:
        body = entity_page_body(tenant, ENTITY_KINDS[kind], after)
        response = store.search_memories([body], f"list the tenant's {kind}s")[0]
        scopes = response["aggregations"]["scopes"]
        for bucket in scopes["buckets"]:
            yield Entity(
                kind=kind,
                name=str(bucket["key"]["id"]),
                memories=int(bucket["doc_count"]),
                created_at=date_of(bucket["first"]),
                updated_at=date_of(bucket["last"]),
            )
        after = scopes.get("after_key")
        if after is None or len(scopes["buckets"]) < ENTITY_PAGE:
            return


def date_of(metric: dict[str, Any]) -> datetime | None:
    """A date aggregation's value (None on a bucket with no such field)."""
    text = metric.get("value_as_string")
    return datetime.fromisoformat(text) if text else None


def entity_page_body(tenant: str, field: ScopeKind, after: dict[str, Any] | None) -> dict[str, Any]:
    """One page of the tenant's distinct ``field`` values, each with its first and last date."""
    composite: dict[str, Any] = {
        "size": ENTITY_PAGE,
        "sources": [{"id": {"terms": {"field": field.value}}}],
    }
    if after is not None:
        composite["after"] = after
    return {
        "size": 0,
        "track_total_hits": False,
        "query": {"bool": {"filter": [{"term": {"tenant": tenant}}]}},
        "aggs": {
            "scopes": {
                "composite": composite,
                "aggs": {
                    "first": {"min": {"field": "created_at"}},
                    "last": {"max": {"field": "updated_at"}},
                },
            }
        },
    }


def delete_entity(store: ServingStore, tenant: str, kind: str, name: str, now: datetime) -> int:
    """Delete every memory of an agent or a run of ``tenant`` (each with its DELETE history
    row); returns how many. A user is erased completely instead (``Intake.erase_user``), which
    the caller does. Deleting an entity without memories deletes nothing and succeeds."""
    field = entity_kind(kind)
    scope = Scope.model_validate({"tenant": tenant, field.value: name})
    return delete_all(store, scope, None, now)


class Feedback(StrEnum):
    """mem0's verdicts on a memory."""

    POSITIVE = "POSITIVE"
    NEGATIVE = "NEGATIVE"
    VERY_NEGATIVE = "VERY_NEGATIVE"


def record_feedback(
    store: ServingStore,
    *,
    tenant: str,
    memory_id: str,
    feedback: Feedback | None,
    reason: str | None,
    now: datetime,
) -> MemoryRecord:
    """Keep ``feedback`` (None clears it) and its ``reason`` on the memory, with the time it
    was given; the memory as stored afterwards. ``NotFoundError`` if the memory is not the
    tenant's; ``InvalidInputError`` for a reason over ``MAX_FEEDBACK_REASON_CHARS``."""
    if reason is not None and len(reason) > MAX_FEEDBACK_REASON_CHARS:
        raise InvalidInputError(
            f"feedback_reason is longer than {MAX_FEEDBACK_REASON_CHARS} characters",
            field="feedback_reason",
        )
    current = crud.get_memory(store, tenant, memory_id)
    fields = {
        "feedback": feedback.value if feedback else None,
        "feedback_reason": reason if feedback else None,
        "feedback_at": now.isoformat() if feedback else None,
    }
    store.update_memory(memory_id, fields, current.scope)
    return crud.get_memory(store, tenant, memory_id)
