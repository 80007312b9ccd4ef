"""Validity: when a memory stopped being true, and which memory says what is true instead.

Glossary:
- *replacement*: the extraction call's word that a new fact makes a stored memory untrue (the
  same attribute of the same subject with a new value). It names two memories of one scope.
- *closure*: what a replacement does. Of its two memories, the OLDER one (by ``observed_at``,
  when the conversation took place) is closed at the NEWER one's ``observed_at``. Normally the
  named memory is the older; a backfill that brings an older conversation in after a newer one
  closes the new fact instead, at the stored memory's time. On equal times the named memory is
  closed (the conversation that named it came later).
- ``valid_until``: the time a memory stopped being true, the earliest time any closure gives
  it; absent while it is still true. ``replaced_by`` / ``replaces``: the memories on either
  side of its closures.

Every change is a set union (``replaced_by``, ``replaces``) or a minimum (``valid_until``):
applied in any order, any number of times, concurrent jobs and replays end with the same
document. The stores apply them with optimistic concurrency (``ElasticStore``) or under a lock
(``InMemoryStore``); the pure functions here decide what to write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipeline.domain.models import Scope

REPLACED_EVENT = "REPLACED"
"""The history event of a memory that a newer one replaced (mem0's surfaces call it UPDATE)."""


def mem0_event(event: str) -> str:
    """A history event as mem0's clients know them: a replacement is an ``UPDATE``."""
    return "UPDATE" if event == REPLACED_EVENT else event


@dataclass(frozen=True)
class Replacement:
    """The fact stored as ``new_id`` replaces the memory ``old_id``, both of ``scope``."""

    new_id: str
    old_id: str
    scope: Scope


@dataclass(frozen=True)
class Closure:
    """``closed`` stopped being true at ``at``, when ``by`` was observed."""

    closed: str
    by: str
    at: datetime
    closed_text: str
    by_text: str


@dataclass
class Change:
    """What closures add to one memory."""

    replaced_by: set[str] = field(default_factory=set)
    replaces: set[str] = field(default_factory=set)
    valid_until: datetime | None = None


def as_time(value: Any) -> datetime | None:
    """A stored date (ISO string) as an aware datetime (UTC when it has no zone)."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def closure_of(
    replacement: Replacement, sources: Mapping[str, Mapping[str, Any]]
) -> Closure | None:
    """The closure ``replacement`` makes, given the stored sources of its memories; None when
    either memory is gone (deleted meanwhile) or has no observation time."""
    new, old = sources.get(replacement.new_id), sources.get(replacement.old_id)
    if new is None or old is None or replacement.new_id == replacement.old_id:
        return None
    new_at, old_at = as_time(new.get("observed_at")), as_time(old.get("observed_at"))
    if new_at is None or old_at is None:
        return None
    if new_at >= old_at:
        closed, by, at = (replacement.old_id, old), (replacement.new_id, new), new_at
    else:
        closed, by, at = (replacement.new_id, new), (replacement.old_id, old), old_at
    return Closure(
        closed=closed[0],
        by=by[0],
        at=at,
        closed_text=str(closed[1].get("text", "")),
        by_text=str(by[1].get("text", "")),
    )


def changes_of(closures: Sequence[Closure | None]) -> dict[str, Change]:
    """Memory id -> what the closures add to it."""
    out: dict[str, Change] = {}
    for closure in closures:
        if closure is None:
            continue
        closed = out.setdefault(closure.closed, Change())
        closed.replaced_by.add(closure.by)
        closed.valid_until = earliest(closed.valid_until, closure.at)
        out.setdefault(closure.by, Change()).replaces.add(closure.closed)
    return out


def earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or b is None:
        return a or b
    return min(a, b)


def merged(source: Mapping[str, Any], change: Change) -> dict[str, Any] | None:
    """The fields to write so that ``source`` holds ``change`` too; None when it already does
    (a replay, or a concurrent job that wrote the same)."""
    replaced_by = set(source.get("replaced_by") or []) | change.replaced_by
    replaces = set(source.get("replaces") or []) | change.replaces
    held = as_time(source.get("valid_until"))
    until = earliest(held, change.valid_until)
    fields: dict[str, Any] = {}
    if replaced_by != set(source.get("replaced_by") or []):
        fields["replaced_by"] = sorted(replaced_by)
    if replaces != set(source.get("replaces") or []):
        fields["replaces"] = sorted(replaces)
    if until is not None and until != held:
        fields["valid_until"] = until.isoformat()
    return fields or None
