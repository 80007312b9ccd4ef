"""The store's side of ``memq reprocess --reextract``: the reads and writes a re-extraction
makes besides the phases' own (``pipeline.features.reextract`` drives it).

- ``BuildNames``: index names whose memories and entities are a build, every other kind the
  shared index, so a store made with them runs the phases into the build;
- the jobs to replay, a page at a time in the order they ran, from the job records;
- a job's context as it was: its session's messages stored before it;
- what was done by hand: memories edited or deleted through the API (history rows with no job);
- the copies a build needs of what it does not re-extract: other tenants' documents, memories
  whose job cannot be replayed, and hand edits;
- the build's checkpoint, kept in its mapping's ``_meta.reprocess``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from elasticsearch import Elasticsearch

from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import ContextMessage, Scope
from pipeline.store.client import es_errors
from pipeline.store.indices import IndexNames, Kind
from pipeline.store.reindex import (
    PAGE_SIZE,
    address,
    by_ids,
    pages,
    raise_item_errors,
    versions,
    write_copies,
)
from pipeline.store.routing import scope_routing

JOBS_PAGE = 200


@dataclass(frozen=True)
class BuildNames(IndexNames):
    """``IndexNames`` with the memories and entities of a build instead of their aliases."""

    memories_index: str = ""
    entities_index: str = ""

    def alias(self, kind: Kind) -> str:
        if kind is Kind.MEMORIES and self.memories_index:
            return self.memories_index
        if kind is Kind.ENTITIES and self.entities_index:
            return self.entities_index
        return super().alias(kind)


def tenant_filter(tenant: str | None) -> list[dict[str, Any]]:
    return [] if tenant is None else [{"term": {"tenant": tenant}}]


def others_query(tenant: str | None) -> dict[str, Any] | None:
    """The documents a re-extraction of ``tenant`` copies as they are (None: none, every
    tenant is re-extracted)."""
    if tenant is None:
        return None
    return {"bool": {"must_not": [{"term": {"tenant": tenant}}]}}


def jobs_to_replay(
    client: Elasticsearch,
    names: IndexNames,
    tenant: str | None,
    *,
    by: str,
    after: list[Any] | None,
    before: datetime | None = None,
    since: datetime | None = None,
) -> Iterator[tuple[JobRecord, list[Any]]]:
    """The succeeded jobs of ``tenant`` (every tenant: None), sorted by ``by`` (``created_at``:
    the order they were taken in; ``finished_at``: the order they ended in) then job id, from
    ``after``; ended before ``before`` and at or after ``since`` when given."""
    ended: dict[str, str] = {}
    if before is not None:
        ended["lt"] = before.isoformat()
    if since is not None:
        ended["gte"] = since.isoformat()
    where = [{"term": {"status": JobStatus.SUCCEEDED.value}}, *tenant_filter(tenant)]
    if ended:
        where.append({"range": {"finished_at": ended}})
    while True:
        body: dict[str, Any] = {
            "size": JOBS_PAGE,
            "query": {"bool": {"filter": where}},
            "sort": [{by: "asc"}, {"job_id": "asc"}],
            "track_total_hits": False,
        }
        if after is not None:
            body["search_after"] = after
        with es_errors("read the jobs to replay"):
            hits = client.search(index=names.jobs, **body).body["hits"]["hits"]
        if not hits:
            return
        for hit in hits:
            yield JobRecord.model_validate(hit["_source"]), hit["sort"]
        after = hits[-1]["sort"]


def count_jobs(client: Elasticsearch, names: IndexNames, tenant: str | None) -> tuple[int, int]:
    """(succeeded jobs, messages they hold) of ``tenant``: what a re-extraction replays."""
    where = [{"term": {"status": JobStatus.SUCCEEDED.value}}, *tenant_filter(tenant)]
    with es_errors("count the jobs to replay"):
        jobs = int(client.count(index=names.jobs, query={"bool": {"filter": where}})["count"])
        messages = int(
            client.count(
                index=names.messages,
                query={"bool": {"filter": [{"term": {"kind": "message"}}, *tenant_filter(tenant)]}},
            )["count"]
        )
    return jobs, messages


def messages_before(
    client: Elasticsearch, names: IndexNames, scope: Scope, *, at: datetime, job_id: str, limit: int
) -> list[ContextMessage]:
    """The last ``limit`` messages of ``scope``'s session stored before ``at`` (oldest first),
    not of ``job_id``: the window the job was given when it ran."""
    if limit <= 0:
        return []
    body: dict[str, Any] = {
        "size": limit,
        "query": {
            "bool": {
                "filter": [
                    {"term": {"kind": "message"}},
                    {"term": {"session_key": scope.key}},
                    {"range": {"created_at": {"lt": at.isoformat()}}},
                ],
                "must_not": [{"term": {"job_id": job_id}}],
            }
        },
        "sort": [{"created_at": "desc"}, {"job_id": "desc"}, {"seq": "desc"}],
        "_source": ["role", "content", "name"],
        "track_total_hits": False,
    }
    with es_errors("read a session's earlier messages"):
        hits = client.search(index=names.messages, routing=scope_routing(scope), **body).body[
            "hits"
        ]["hits"]
    return [ContextMessage.model_validate(hit["_source"]) for hit in reversed(hits)]


@dataclass(frozen=True)
class HandChanges:
    """Memories of the re-extracted tenant(s) changed through the API: edited (their text is
    the user's now) and deleted."""

    edited: frozenset[str]
    deleted: frozenset[str]


def hand_changes(client: Elasticsearch, names: IndexNames, tenant: str | None) -> HandChanges:
    """The memories with an ``UPDATE`` or ``DELETE`` history row that no job wrote."""
    found: dict[str, set[str]] = {"UPDATE": set(), "DELETE": set()}
    where = [{"terms": {"event": sorted(found)}}, {"term": {"job_id": ""}}, *tenant_filter(tenant)]
    for hits in pages(
        client,
        names.history,
        with_source=["memory_id", "event"],
        query={"bool": {"filter": where}},
    ):
        for hit in hits:
            found[hit["_source"]["event"]].add(hit["_source"]["memory_id"])
    return HandChanges(frozenset(found["UPDATE"]), frozenset(found["DELETE"]))


def memory_jobs(client: Elasticsearch, index: str, tenant: str | None) -> set[str]:
    """The job ids the memories of ``tenant`` in ``index`` were written by."""
    return {key["job_id"] for key in distinct(client, index, tenant, ("job_id",))}


def distinct(
    client: Elasticsearch, index: str, tenant: str | None, fields: Sequence[str]
) -> Iterator[dict[str, Any]]:
    """Each distinct combination of ``fields`` among the documents of ``tenant`` (every
    tenant: None) in ``index``, a composite aggregation's page at a time."""
    sources = [{field: {"terms": {"field": field}}} for field in fields]
    after: dict[str, Any] | None = None
    while True:
        composite: dict[str, Any] = {"size": PAGE_SIZE, "sources": sources}
        if after is not None:
            composite["after"] = after
        with es_errors(f"read the {', '.join(fields)} of {index}"):
            body = client.search(
                index=index,
                size=0,
                query={"bool": {"filter": tenant_filter(tenant)}},
                aggregations={"keys": {"composite": composite}},
            ).body
        found = body["aggregations"]["keys"]
        for bucket in found["buckets"]:
            yield bucket["key"]
        after = found.get("after_key")
        if after is None or not found["buckets"]:
            return


def copy_matching(
    client: Elasticsearch, kind: Kind, source: str, target: str, query: dict[str, Any]
) -> int:
    """Copy into ``target`` each document of ``source`` matching ``query`` it lacks at its
    version (vectors and all: the build has the source's embedder); returns how many."""
    copied = 0
    for hits in pages(client, source, with_source=True, query=query):
        held = versions(client, target, [h["_id"] for h in hits])
        stale = [h for h in hits if held.get(h["_id"]) != h["_version"]]
        if stale:
            write_copies(client, kind, target, stale)
        copied += len(stale)
    return copied


def overwrite_with(
    client: Elasticsearch, kind: Kind, source: str, target: str, ids: list[str]
) -> int:
    """Write ``source``'s documents ``ids`` over whatever ``target`` holds under those ids."""
    hits = by_ids(client, source, ids) if ids else []
    if hits:
        write_copies(client, kind, target, hits, versioned=False)
    return len(hits)


def delete_ids(client: Elasticsearch, target: str, ids: Sequence[str]) -> int:
    """Delete the memories ``ids`` from ``target`` (those it holds)."""
    deleted = 0
    for start in range(0, len(ids), PAGE_SIZE):
        chunk = list(ids[start : start + PAGE_SIZE])
        hits = by_ids(client, target, chunk)
        if hits:
            delete_hits(client, target, hits)
            deleted += len(hits)
    return deleted


def delete_hits(client: Elasticsearch, target: str, hits: list[dict[str, Any]]) -> None:
    ops = [{"delete": address(target, h)} for h in hits]
    with es_errors(f"delete from {target}"):
        body = client.bulk(operations=ops).body
    raise_item_errors(body, f"delete from {target}", allowed=frozenset({404}))


def erased_since(client: Elasticsearch, names: IndexNames, since: datetime) -> set[str]:
    """The subjects (``sha256:`` of tenant and user id) of the users erased since ``since``,
    from the audit rows erasure leaves (``pipeline.features.erase.audit_row``)."""
    where = [{"term": {"event": "ERASE"}}, {"range": {"created_at": {"gte": since.isoformat()}}}]
    subjects: set[str] = set()
    for hits in pages(
        client, names.history, with_source=["actor"], query={"bool": {"filter": where}}
    ):
        subjects.update(str(hit["_source"].get("actor", "")) for hit in hits)
    return subjects


def users_in(client: Elasticsearch, index: str, tenant: str | None) -> set[tuple[str, str]]:
    """The (tenant, user id) pairs the documents of ``index`` belong to."""
    keys = distinct(client, index, tenant, ("tenant", "user_id"))
    return {(key["tenant"], key["user_id"]) for key in keys}


def refresh_jobs(client: Elasticsearch, names: IndexNames) -> None:
    """Make every job record and message written so far visible to searches."""
    with es_errors("refresh the job records and messages"):
        client.indices.refresh(index=f"{names.jobs},{names.messages}")


def build_meta(client: Elasticsearch, index: str) -> dict[str, Any]:
    """The ``_meta`` of ``index``'s mapping."""
    with es_errors(f"read the mapping of {index}"):
        body = client.indices.get_mapping(index=index).body
    meta: dict[str, Any] = body[index]["mappings"].get("_meta", {})
    return meta


def save_checkpoint(client: Elasticsearch, index: str, checkpoint: dict[str, Any]) -> None:
    """Write ``checkpoint`` into ``_meta.reprocess.checkpoint`` (the whole ``_meta`` is
    written: Elasticsearch replaces it)."""
    meta = build_meta(client, index)
    meta["reprocess"] = {**meta.get("reprocess", {}), "checkpoint": checkpoint}
    with es_errors(f"save the checkpoint of {index}"):
        client.indices.put_mapping(index=index, meta=meta)
