"""The fields a memory's write derives from its other fields, and giving them to memories
written before they existed, in place.

Two kinds, both carried by every write (``with_derived``):
- ``substrings``: ``contains`` / ``icontains`` on keyword and metadata fields look in them
  (``pipeline.store.filters.substring_terms``); a memory without them no substring filter finds;
- the ranking columns (``pipeline.store.columns``): a memory without them is ranked from its
  ``_source``, read in one more search.
``ensure_indices`` fills in what memories written before lack, at start: a point in time over
the memories without ``substrings.hash`` (every memory has a hash) or without ``mentions_time``
(every memory has a text), one partial update each, guarded by the version read, so a memory
another writer changed meanwhile is read again instead of overwritten. Safe to run twice or
from several processes at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from elasticsearch import Elasticsearch

from pipeline.errors import TransientError
from pipeline.store.client import es_errors
from pipeline.store.columns import MENTIONS_TIME, rank_columns
from pipeline.store.filters import (
    SUBSTRINGS_FIELD,
    substring_fields,
    substring_terms,
    with_substrings,
)

log = logging.getLogger(__name__)

_MISSING = {
    "bool": {
        "should": [
            {"bool": {"must_not": [{"exists": {"field": f"{SUBSTRINGS_FIELD}.hash"}}]}},
            {"bool": {"must_not": [{"exists": {"field": MENTIONS_TIME}}]}},
        ],
        "minimum_should_match": 1,
    }
}
_ROUNDS = 5  # each round re-reads what changed under the previous one
_PAGE = 500


def with_derived(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` (a memory's source, or a partial update of one) with what follows from
    them: the ``substrings`` of the searchable fields and the ranking columns among them, as
    every write of a memory must carry them."""
    return {**with_substrings(fields), **rank_columns(fields)}


def fill_derived(client: Elasticsearch, index: str) -> int:
    """Write the derived fields of every memory of ``index`` (an alias) that lacks them;
    returns how many were written. Raises ``TransientError`` when memories keep changing
    under it."""
    filled = 0
    for _ in range(_ROUNDS):
        with es_errors(f"count memories without derived fields in {index}"):
            if client.count(index=index, query=_MISSING)["count"] == 0:
                return filled
        written, conflicts = _fill_round(client, index)
        filled += written
        if written:
            log.info("filled the derived fields of %d memories in %s", written, index)
        if not conflicts:
            return filled
    raise TransientError(
        f"memories of {index} kept changing while their derived fields were filled"
    )


def _fill_round(client: Elasticsearch, index: str) -> tuple[int, int]:
    """One pass over the memories without derived fields: (written, conflicted)."""
    written = conflicts = 0
    with es_errors(f"fill derived fields in {index}"):
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
            "_source": {"includes": [*substring_fields(), "text", "text_lemmatized"]},
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
        source = hit["_source"]
        derived = {SUBSTRINGS_FIELD: substring_terms(source), **rank_columns(source)}
        actions.append({"doc": derived})
    body = client.bulk(operations=actions, refresh=True)
    statuses = [item["update"]["status"] for item in body["items"]]
    failed = [s for s in statuses if s not in (200, 404, 409)]
    if failed:
        raise TransientError(
            f"filling derived fields in {index}: bulk statuses {sorted(set(failed))}"
        )
    return statuses.count(200), statuses.count(409)
