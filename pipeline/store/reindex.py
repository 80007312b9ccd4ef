"""``memq reindex``: move one kind of document onto a new index (another shard or replica
count, or the current schema) behind the same alias, while memq keeps running.

The shard count of an index is fixed when it is made, so a new one is made and the documents
copied into it. The copy is done by memq itself (a point in time read page by page, bulk
writes), not by Elasticsearch's reindex API, which lives in a module the minimal distribution
that ``ops/`` runs does not have. Each document keeps its routing (one written before routing,
schema 1, gets the routing memq gives it now) and its version.

Writes are never lost, in two passes:

1. **Copy.** Everything the old index holds at a point in time is copied while reads and writes
   go on as usual through the alias, to the old index. Each copy carries the old document's
   ``_version`` (``version_type=external``).
2. **Catch up.** Writes to the old index are paused (an index write block), then the two are
   compared: a document whose version differs, or that the copy lacks, is copied again, and
   one the old index no longer holds (deleted meanwhile) is deleted from the new. Then the
   alias moves to the new index in one atomic step and the block goes with the old index.

During the catch-up (reads of ids and versions only: seconds per million documents) a write
meets the block, which memq classifies as transient: a worker's phase is retried with backoff
until it lands in the new index, and the API answers 503 with Retry-After. Reads never pause.
If anything fails before the alias moves, the block is lifted and the new index deleted: the
old one goes on as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from elasticsearch import Elasticsearch

from pipeline.config import ElasticsearchConfig
from pipeline.errors import ConfigurationError, InvalidInputError, TransientError
from pipeline.store.client import error_reason, es_errors
from pipeline.store.indices import (
    ROUTED,
    SCHEMA_VERSION,
    IndexNames,
    Kind,
    put_templates,
    vectors_in_use,
)
from pipeline.store.routing import history_routing, source_routing

PAGE_SIZE = 1000
KEEP_ALIVE = "5m"


@dataclass(frozen=True)
class Reindexed:
    """What one kind's move did: the indices, and the documents copied in the first pass,
    copied again by the catch-up, and deleted by it."""

    kind: Kind
    source: str
    target: str
    copied: int
    recopied: int
    deleted: int


Progress = Callable[[str], None]


def reindex(
    client: Elasticsearch,
    config: ElasticsearchConfig,
    dims: int,
    kind: Kind,
    *,
    shards: int,
    replicas: int,
    progress: Progress = lambda _: None,
    keep_old: bool = False,
) -> Reindexed:
    """Move ``kind`` onto a new index of ``shards`` and ``replicas`` (see the module doc).
    ``progress`` hears each step (the CLI prints them; it runs between the passes, while
    writes still go on). Raises ``InvalidInputError`` for counts out of range and
    ``ConfigurationError`` when the alias is missing or points at several indices."""
    check_counts(shards, replicas)
    names = IndexNames(config.index_prefix)
    alias = names.alias(kind)
    source = single_index(client, alias)
    target = f"{alias}-v{SCHEMA_VERSION}-{time.time_ns() // 1_000_000}"
    put_templates(client, config, *vectors_in_use(client, names, dims))
    with es_errors(f"create {target}"):
        client.indices.create(
            index=target,
            settings={"number_of_shards": shards, "number_of_replicas": replicas},
        )
    try:
        copied = copy_all(client, kind, source, target)
        progress(f"{alias}: copied {copied} documents from {source} to {target}")
        recopied, deleted = catch_up_and_switch(
            client, kind, alias, source, target, progress=progress
        )
    except BaseException:
        with es_errors(f"delete {target}"):
            client.options(ignore_status=404).indices.delete(index=target)
        raise
    if not keep_old:
        with es_errors(f"delete {source}"):
            client.indices.delete(index=source)
    return Reindexed(kind, source, target, copied, recopied, deleted)


def check_counts(shards: int, replicas: int) -> None:
    if not 1 <= shards <= 64:
        raise InvalidInputError("--shards must be 1..64", field="shards")
    if not 0 <= replicas <= 8:
        raise InvalidInputError("--replicas must be 0..8", field="replicas")


def single_index(client: Elasticsearch, alias: str) -> str:
    """The one concrete index behind ``alias``."""
    with es_errors(f"read alias {alias}"):
        found = client.options(ignore_status=404).indices.get_alias(name=alias).body
    indices = sorted(str(index) for index in found if index not in {"error", "status"})
    if not indices:
        raise ConfigurationError(f"there is no index {alias}: run `memq init` first")
    if len(indices) > 1:
        raise ConfigurationError(
            f"{alias} points at {', '.join(indices)}: another reindex may be running, or one "
            "was interrupted; remove the index that should not be there from the alias"
        )
    return indices[0]


def catch_up_and_switch(
    client: Elasticsearch, kind: Kind, alias: str, source: str, target: str, *, progress: Progress
) -> tuple[int, int]:
    """Pause writes to ``source``, bring ``target`` level with it, move the alias."""
    with es_errors(f"pause writes to {source}"):
        client.indices.put_settings(index=source, settings={"index.blocks.write": True})
    try:
        progress(f"{alias}: writes to {source} paused for the catch-up")
        with es_errors("refresh before the catch-up"):
            client.indices.refresh(index=f"{source},{target}")
        recopied = recopy_changed(client, kind, source, target)
        deleted = delete_gone(client, source, target)
        with es_errors(f"move {alias} to {target}"):
            client.indices.refresh(index=target)
            client.indices.update_aliases(
                actions=[
                    {"remove": {"index": source, "alias": alias}},
                    {"add": {"index": target, "alias": alias, "is_write_index": True}},
                ]
            )
    except BaseException:
        with es_errors(f"resume writes to {source}"):
            client.indices.put_settings(index=source, settings={"index.blocks.write": False})
        raise
    progress(f"{alias}: caught up ({recopied} copied again, {deleted} deleted), now {target}")
    return recopied, deleted


def copy_all(client: Elasticsearch, kind: Kind, source: str, target: str) -> int:
    copied = 0
    for hits in pages(client, source, with_source=True):
        write_copies(client, kind, target, hits)
        copied += len(hits)
    return copied


def recopy_changed(client: Elasticsearch, kind: Kind, source: str, target: str) -> int:
    """Copy again each document of ``source`` whose version the target lacks."""
    recopied = 0
    for hits in pages(client, source, with_source=False):
        held = versions(client, target, [h["_id"] for h in hits])
        stale = [h["_id"] for h in hits if held.get(h["_id"]) != h["_version"]]
        if stale:
            write_copies(client, kind, target, by_ids(client, source, stale), versioned=False)
            recopied += len(stale)
    return recopied


def delete_gone(
    client: Elasticsearch, source: str, target: str, query: dict[str, Any] | None = None
) -> int:
    """Delete from ``target`` what ``source`` no longer holds (deleted during the copy), among
    the documents matching ``query`` (all by default)."""
    deleted = 0
    for hits in pages(client, target, with_source=False, query=query):
        held = versions(client, source, [h["_id"] for h in hits])
        gone = [h for h in hits if h["_id"] not in held]
        if gone:
            ops = [{"delete": address(target, h)} for h in gone]
            with es_errors(f"delete from {target}"):
                body = client.bulk(operations=ops).body
            raise_item_errors(body, f"delete from {target}")
            deleted += len(gone)
    return deleted


def pages(
    client: Elasticsearch,
    index: str,
    with_source: bool | list[str],
    size: int = PAGE_SIZE,
    query: dict[str, Any] | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """Every document of ``index`` (matching ``query``: all by default) from one point in
    time, a page at a time, with its version and routing (and its whole source, vectors
    included, when ``with_source`` is True; those fields only when it lists some)."""
    if isinstance(with_source, list):
        source: Any = with_source
    else:
        source = {"exclude_vectors": False} if with_source else False
    with es_errors(f"open a point in time over {index}"):
        pit = client.open_point_in_time(index=index, keep_alive=KEEP_ALIVE)["id"]
    try:
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": size,
                "query": query or {"match_all": {}},
                "sort": [{"_shard_doc": "asc"}],
                "pit": {"id": pit, "keep_alive": KEEP_ALIVE},
                "version": True,
                "_source": source,
                "track_total_hits": False,
            }
            if after is not None:
                body["search_after"] = after
            with es_errors(f"read {index}"):
                hits: list[dict[str, Any]] = client.search(**body)["hits"]["hits"]
            if not hits:
                return
            yield hits
            after = hits[-1]["sort"]
    finally:
        with es_errors("close a point in time"):
            client.options(ignore_status=404).close_point_in_time(id=pit)


def versions(client: Elasticsearch, index: str, ids: list[str]) -> dict[str, int]:
    """The version of each of ``ids`` that ``index`` holds (a search: any shard, any routing)."""
    with es_errors(f"read versions from {index}"):
        hits = client.search(
            index=index,
            query={"ids": {"values": ids}},
            size=len(ids),
            version=True,
            source=False,
            track_total_hits=False,
        )["hits"]["hits"]
    return {h["_id"]: h["_version"] for h in hits}


def by_ids(client: Elasticsearch, index: str, ids: list[str]) -> list[dict[str, Any]]:
    with es_errors(f"read {index}"):
        hits: list[dict[str, Any]] = client.search(
            index=index,
            query={"ids": {"values": ids}},
            size=len(ids),
            version=True,
            source={"exclude_vectors": False},
            track_total_hits=False,
        )["hits"]["hits"]
    return hits


def write_copies(
    client: Elasticsearch,
    kind: Kind,
    target: str,
    hits: list[dict[str, Any]],
    versioned: bool = True,
) -> None:
    """Index each hit into ``target`` under its id and routing; ``versioned`` (the copy):
    with the old document's version too, for the catch-up to compare. The catch-up itself
    overwrites (no one else writes to the target yet): a document deleted and written again
    meanwhile whose version started over lower than its copy's still replaces it."""
    ops: list[dict[str, Any]] = []
    for hit in hits:
        header = address(target, hit)
        if versioned:
            header |= {"version": hit["_version"], "version_type": "external"}
        if kind in ROUTED and "routing" not in header:  # written before routing (schema 1)
            header["routing"] = routing_of(kind, hit["_id"], hit["_source"])
        ops += [{"index": header}, hit["_source"]]
    with es_errors(f"copy into {target}"):
        body = client.bulk(operations=ops).body
    raise_item_errors(body, f"copy into {target}", allowed=frozenset({409}))


def address(index: str, hit: Mapping[str, Any]) -> dict[str, Any]:
    found = {"_index": index, "_id": hit["_id"]}
    return found | ({"routing": hit["_routing"]} if "_routing" in hit else {})


def routing_of(kind: Kind, doc_id: str, source: Mapping[str, Any]) -> str:
    if kind is Kind.HISTORY:
        return history_routing(str(source.get("memory_id", "")), doc_id)
    return source_routing(source)


def raise_item_errors(
    body: Mapping[str, Any], what: str, allowed: frozenset[int] = frozenset()
) -> None:
    """Any failed item fails the move (409, when ``allowed``: the target holds a newer
    version already, which is what the copy wants)."""
    if not body.get("errors"):
        return
    for item in body["items"]:
        result = next(iter(item.values()))
        if result.get("error") and result["status"] not in allowed:
            raise TransientError(f"{what}: HTTP {result['status']} {error_reason(result['error'])}")
