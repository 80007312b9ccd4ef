"""Giving memories written before ``substrings`` existed their substrings, in place.

``contains`` / ``icontains`` on keyword and metadata fields look in a memory's ``substrings``
(``pipeline.store.filters.substring_terms``); every write since carries them. A memory written
before has none, and no substring filter would find it, so ``ensure_indices`` fills them in at
start: a point in time over the memories without ``substrings.hash`` (every memory has a hash), one
partial update each, guarded by the version read, so a memory another writer changed meanwhile
is read again instead of overwritten. Safe to run twice or from several processes at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from elasticsearch import Elasticsearch

from pipeline.errors import TransientError
from pipeline.store.client import es_errors
from pipeline.store.filters import SUBSTRINGS_FIELD, substring_fields, substring_terms

log = logging.getLogger(__name__)

_MISSING = {"bool": {"must_not": [{"exists": {"field": f"{SUBSTRINGS_FIELD}.hash"}}]}}
_ROUNDS = 5  # each round re-reads what changed under the previous one
_PAGE = 500


def fill_substrings(client: Elasticsearch, index: str) -> int:
    """Write the ``substrings`` of every memory of ``index`` (an alias) that has none; returns
    how many were written. Raises ``TransientError`` when memories keep changing under it."""
    filled = 0
    for _ in range(_ROUNDS):
        with es_errors(f"count memories without substrings in {index}"):
            if client.count(index=index, query=_MISSING)["count"] == 0:
                return filled
        written, conflicts = _fill_round(client, index)
        filled += written
        if written:
            log.info("filled the substrings of %d memories in %s", written, index)
        if not conflicts:
            return filled
    raise TransientError(f"memories of {index} kept changing while their substrings were filled")


def _fill_round(client: Elasticsearch, index: str) -> tuple[int, int]:
    """One pass over the memories without substrings: (written, conflicted)."""
    written = conflicts = 0
    with es_errors(f"fill substrings in {index}"):
        client.indices.refresh(index=index)
        pit = client.open_point_in_time(index=index, keep_alive="2m")["id"]
        try:
            for hits in _pages(client, pit):
                done, clashed = _update(client, index, hits)
                written, conflicts = written + done, conflicts + clashed
        finally:
            client.options(ignore_status=404).close_point_in_time(id=pit)
    return written, conflicts


def _pages(client: Elasticsearch, pit: str) -> Iterator[list[dict[str, Any]]]:
    after: list[Any] | None = None
    while True:
        body: dict[str, Any] = {
            "size": _PAGE,
            "query": _MISSING,
            "sort": [{"_shard_doc": "asc"}],
            "pit": {"id": pit, "keep_alive": "2m"},
            "_source": {"includes": list(substring_fields())},
            "seq_no_primary_term": True,
            "track_total_hits": False,
        }
        if after is not None:
            body["search_after"] = after
        hits: list[dict[str, Any]] = client.search(**body)["hits"]["hits"]
        if not hits:
            return
        yield hits
        after = hits[-1]["sort"]


def _update(client: Elasticsearch, index: str, hits: list[dict[str, Any]]) -> tuple[int, int]:
    actions: list[dict[str, Any]] = []
    for hit in hits:
        header = {"_index": index, "_id": hit["_id"]}
        if "_routing" in hit:  # an index made before routing has none
            header["routing"] = hit["_routing"]
        guard = {"if_seq_no": hit["_seq_no"], "if_primary_term": hit["_primary_term"]}
        actions.append({"update": {**header, **guard}})
        actions.append({"doc": {SUBSTRINGS_FIELD: substring_terms(hit["_source"])}})
    body = client.bulk(operations=actions, refresh=True)
    statuses = [item["update"]["status"] for item in body["items"]]
    failed = [s for s in statuses if s not in (200, 404, 409)]
    if failed:
        raise TransientError(f"filling substrings in {index}: bulk statuses {sorted(set(failed))}")
    return statuses.count(200), statuses.count(409)
