"""Where a document lives among an index's shards: custom routing by scope.

Memories, entities and messages are routed by their scope's *owner*: the tenant and the user
when there is one, else the agent, else the run. Every document of one user of one tenant sits
on one shard, whatever its agent or run, so a search that names the user visits one shard
instead of all of them. History rows are routed by the memory they belong to (a memory's
history is read by its id), job records and keys are not routed.

The indices that are routed declare ``_routing: {required: true}``: a write or a get that
forgot its routing is refused by Elasticsearch instead of silently landing on (or missing) the
wrong shard.

A read that knows only part of a scope cannot name one shard: a search by agent or run alone
matches documents routed by their user too, so it visits every shard (``search_routing``
returns None), and so does a read by id alone (see ``ElasticStore.get_memory``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.domain.models import Scope

_SEPARATOR = "\x1f"  # never inside an identifier (see ``pipeline.domain.models.Identifier``)


def owner_routing(
    tenant: str, user_id: str | None, agent_id: str | None, run_id: str | None
) -> str:
    """The routing value of a document with these scope fields."""
    if user_id:
        return _SEPARATOR.join((tenant, "u", user_id))
    if agent_id:
        return _SEPARATOR.join((tenant, "a", agent_id))
    if run_id:
        return _SEPARATOR.join((tenant, "r", run_id))
    raise ValueError("a routed document needs one of user_id, agent_id, run_id")


def scope_routing(scope: Scope) -> str:
    """Where the documents written for ``scope`` live."""
    return owner_routing(scope.tenant, scope.user_id, scope.agent_id, scope.run_id)


def source_routing(source: Mapping[str, Any]) -> str:
    """The routing of a stored memory, entity or message, from its own scope fields."""
    return owner_routing(
        str(source.get("tenant", "default")),
        source.get("user_id"),
        source.get("agent_id"),
        source.get("run_id"),
    )


def search_routing(scope: Scope) -> str | None:
    """The one routing value a read of ``scope`` may use, or None: every shard. Only a scope
    that names its user pins every matching document to one routing; a scope of an agent or
    a run alone also matches documents that user ids route elsewhere."""
    return scope_routing(scope) if scope.user_id else None


def history_routing(memory_id: str, row_id: str) -> str:
    """A history row lives with its memory's other rows; a row of no memory (an erasure's
    audit row) by its own id."""
    return memory_id or row_id
