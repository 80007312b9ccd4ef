"""Erasing a user: every document that holds what the user said or what was learnt from it.

``erase_user`` removes, for one user of one tenant (every agent and run of theirs):

- memories;
- history rows (an UPDATE's or DELETE's ``old`` text included);
- raw turns in the messages index and the session windows;
- entities of their scopes, with their links;
- job records (they keep the request).

What stays: one ``ERASE`` row in the history index, with no content: the tenant, the time,
the counts, and a SHA-256 of the user id (so an audit can show that a given user was erased
without keeping who). The Redis side (job state, session lines, chat buffers) is erased by
``workers.erase``, which calls this first to learn the user's jobs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from pipeline.domain.models import Scope, history_id
from pipeline.store.elastic import ElasticStore
from pipeline.store.protocol import HistoryDoc
from pipeline.store.routing import scope_routing

MAX_TERMS = 10_000  # memory ids per terms query (Elasticsearch allows 65,536)


class UserErased(BaseModel):
    """What erasing a user removed, and which of the user's jobs were still unfinished."""

    erased: dict[str, int] = Field(description="how many documents or keys went, per place")
    in_flight: list[str] = Field(
        description="the user's jobs that were unfinished: erase again once they have ended"
    )


@dataclass(frozen=True)
class ErasedJob:
    job_id: str
    session_key: str
    attempts: int


@dataclass(frozen=True)
class Erasure:
    """What was deleted, per index, and the user's jobs (for the Redis side)."""

    counts: dict[str, int]
    jobs: list[ErasedJob] = field(default_factory=list)


def user_query(tenant: str, user_id: str) -> dict[str, Any]:
    return {"bool": {"filter": [{"term": {"tenant": tenant}}, {"term": {"user_id": user_id}}]}}


def jobs_query(tenant: str, user_id: str) -> dict[str, Any]:
    """Job records carry their scope in ``session_key`` (tenant, user, agent, run)."""
    prefix = f"{tenant}\x1f{user_id}\x1f"  # the start of ``Scope.key`` for every agent and run
    return {"bool": {"filter": [{"term": {"tenant": tenant}}, {"prefix": {"session_key": prefix}}]}}


def history_queries(tenant: str, user_id: str, memory_ids: list[str]) -> Iterator[dict[str, Any]]:
    """Queries for every history row of the user: rows that name the user, and rows of the
    user's memories that do not (a scope-wide DELETE of an agent's memories wrote its rows
    under the agent's scope before rows carried the memory's own), ``MAX_TERMS`` ids each."""
    yield user_query(tenant, user_id)
    for start in range(0, len(memory_ids), MAX_TERMS):
        chunk = memory_ids[start : start + MAX_TERMS]
        yield {"bool": {"filter": [{"term": {"tenant": tenant}}, {"terms": {"memory_id": chunk}}]}}


def erase_history(store: ElasticStore, tenant: str, user_id: str, routing: str) -> int:
    """Delete the user's history rows (see ``history_queries``); the memory ids are read from
    the user's memories and from the rows that name the user, before anything is deleted."""
    names, query = store.names, user_query(tenant, user_id)
    ids = set(store.matching_ids(names.memories, query, routing))
    ids |= {
        s.get("memory_id", "") for s in store.matching_sources(names.history, query, ["memory_id"])
    }
    ids.discard("")
    return sum(
        store.delete_matching(names.history, q)
        for q in history_queries(tenant, user_id, sorted(ids))
    )


def erase_user(store: ElasticStore, tenant: str, user_id: str, now: datetime) -> Erasure:
    """Delete everything of ``user_id`` in ``tenant`` from Elasticsearch (see the module doc),
    then write the audit row. Safe to call again: a second call finds nothing more."""
    names = store.names
    jobs = [
        ErasedJob(s["job_id"], s.get("session_key", ""), int(s.get("attempts", 0)))
        for s in store.matching_sources(
            names.jobs, jobs_query(tenant, user_id), ["job_id", "session_key", "attempts"]
        )
    ]
    query = user_query(tenant, user_id)
    # the user's memories, entities and messages all live on the shard of their routing;
    # history rows are routed by memory and jobs not at all, so those read every shard
    routing = scope_routing(Scope(tenant=tenant, user_id=user_id))
    counts = {
        "history": erase_history(store, tenant, user_id, routing),  # reads the memories' ids
        "memories": store.delete_matching(names.memories, query, routing),
        "entities": store.delete_matching(names.entities, query, routing),
        "messages": store.delete_matching(names.messages, query, routing),
        "jobs": store.delete_matching(names.jobs, jobs_query(tenant, user_id)),
    }
    store.write_history([audit_row(tenant, user_id, counts, now)])
    return Erasure(counts, jobs)


def erasure_subject(tenant: str, user_id: str) -> str:
    """How the audit row names an erased user: ``sha256:`` and the hex digest of the tenant and
    the user id (an audit can check a given user; the row does not say who)."""
    return "sha256:" + hashlib.sha256(f"{tenant}\x1f{user_id}".encode()).hexdigest()


def audit_row(tenant: str, user_id: str, counts: dict[str, int], now: datetime) -> HistoryDoc:
    subject = erasure_subject(tenant, user_id)
    summary = ", ".join(f"{kind} {n}" for kind, n in counts.items())
    return HistoryDoc(
        id=history_id(f"erase:{subject}", "ERASE", now.isoformat()),
        memory_id="",
        scope=Scope.model_construct(tenant=tenant),  # the tenant only: no one's ids
        event="ERASE",
        job_id="",
        created_at=now,
        new=f"erased user {subject} ({summary})",
        actor=subject,
    )
