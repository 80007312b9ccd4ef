"""Elasticsearch request bodies of a search and of a listing page, and readers of responses.

Plain functions from values to dicts (and back): the store and the searcher share them, and
nothing here calls Elasticsearch.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from pipeline.domain.models import VIEW_SOURCE_FIELDS
from pipeline.store.columns import RANK_FIELDS, columns_of

_POSSESSIVE = re.compile(r"(?<=\w)['\u2019]s\b", re.IGNORECASE)


def without_possessives(text: str) -> str:
    """ "Maria's dog" → "Maria dog": a name in the possessive still matches the speaker."""
    return _POSSESSIVE.sub("", text)


def not_expired() -> dict[str, Any]:
    """Memories without an expiration date, or whose date is still ahead."""
    return {
        "bool": {
            "should": [
                {"bool": {"must_not": {"exists": {"field": "expiration_date"}}}},
                {"range": {"expiration_date": {"gt": "now"}}},
            ],
            "minimum_should_match": 1,
        }
    }


def still_valid(moment: datetime | str) -> dict[str, Any]:
    """Memories not yet replaced at ``moment`` (a time, or Elasticsearch's ``"now"``): without
    ``valid_until``, or whose ``valid_until`` is after it (``pipeline.domain.validity``)."""
    at = moment.isoformat() if isinstance(moment, datetime) else moment
    return {
        "bool": {
            "should": [
                {"bool": {"must_not": {"exists": {"field": "valid_until"}}}},
                {"range": {"valid_until": {"gt": at}}},
            ],
            "minimum_should_match": 1,
        }
    }


def validity(as_of: datetime | None, include_replaced: bool) -> list[dict[str, Any]]:
    """The clauses that choose memories by validity: by default those true now; with
    ``as_of``, those true then (observed by then, not yet replaced then); ``include_replaced``
    keeps replaced ones too (and with ``as_of``, still only what was observed by then)."""
    clauses: list[dict[str, Any]] = []
    if as_of is not None:
        clauses.append({"range": {"observed_at": {"lte": as_of.isoformat()}}})
    if not include_replaced:
        clauses.append(still_valid(as_of or "now"))
    return clauses


DOC_FIELDS = (*VIEW_SOURCE_FIELDS, "text_lemmatized", "job_id", "turn")
"""The fields search reads of a memory it shows or ranks without columns: what a hit shows,
what feedback and the reply need."""


def knn_body(
    vector: Sequence[float], clauses: list[dict[str, Any]], size: int, fields: bool = False
) -> dict[str, Any]:
    """The ``size`` nearest memories; with ``fields``, each with the columns ranking reads
    (``RANK_FIELDS``), not its source."""
    return {
        "size": size,
        "_source": False,
        **({"docvalue_fields": list(RANK_FIELDS)} if fields else {}),
        "knn": {
            "field": "embedding",
            "query_vector": list(vector),
            "k": size,
            "num_candidates": min(10_000, max(100, 4 * size)),
            "filter": clauses,
        },
    }


def also_scored_by(body: dict[str, Any], query: dict[str, Any], name: str) -> dict[str, Any]:
    """``body`` with each hit also scored by ``query``, read back as the hit's score for the
    named query ``name`` (asked with ``include_named_queries_score``): a rescore of weight 0
    over every hit, so neither the hits nor their order or scores change."""
    return {
        **body,
        "rescore": {
            "window_size": body["size"],
            "query": {
                "query_weight": 1,
                "rescore_query_weight": 0,
                "rescore_query": {"bool": {**query, "_name": name}},
            },
        },
    }


def docs_body(ids: list[str], clauses: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "size": len(ids) or 1,
        "_source": {"includes": list(DOC_FIELDS)},
        "query": {"bool": {"filter": [*clauses, {"ids": {"values": ids}}]}},
    }


VECTOR_FIELDS: list[dict[str, str]] = [{"field": "embedding", "format": "binary"}]
"""``docvalue_fields`` that read a memory's vector as its bytes (base64 of big-endian
float32s) from doc values: about a fifth of the size of its floats written as JSON, with no
float formatting on Elasticsearch's side nor parsing on ours (see ``vector_of``)."""


Vector = npt.NDArray[np.float32]


def vector_of(hit: Mapping[str, Any]) -> Vector | None:
    """The vector a hit read with ``VECTOR_FIELDS`` as an array (None when it has none). The
    memories' ``embedding`` is a ``float`` dense vector, so its bytes are big-endian float32s."""
    values = (hit.get("fields") or {}).get("embedding")
    if not values:
        return None
    return np.frombuffer(base64.b64decode(values[0]), dtype=">f4").astype(np.float32)


RANKED_FIELDS: list[str | dict[str, str]] = [*RANK_FIELDS, *VECTOR_FIELDS]
"""``docvalue_fields`` of a candidate read with its vector: what ranking reads of it."""


def ranked_doc(hit: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a hit read with ``RANK_FIELDS`` (and maybe ``VECTOR_FIELDS``) says for ranking: its
    columns, with its vector as ``embedding`` when it read one; None for a memory without
    columns (``pipeline.store.columns``), whose source must be read to rank it."""
    doc = columns_of(hit)
    if doc is None:
        return None
    vector = vector_of(hit)
    if vector is not None:
        doc["embedding"] = vector
    return doc


def vectors_body(ids: list[str], clauses: list[dict[str, Any]]) -> dict[str, Any]:
    """The stored vectors of ``ids`` (only these), each read by ``vector_of``."""
    return {
        "size": len(ids) or 1,
        "_source": False,
        "docvalue_fields": VECTOR_FIELDS,
        "query": {"bool": {"filter": [*clauses, {"ids": {"values": ids}}]}},
    }


def listing_body(
    clauses: list[dict[str, Any]], pit: str, keep_alive: str, after: list[Any] | None, size: int
) -> dict[str, Any]:
    """One page of a listing over the point in time ``pit``: oldest first (the point in time's
    own tiebreaker settles equal dates), after the sort values ``after`` of the last page."""
    body: dict[str, Any] = {
        "size": size,
        "query": {"bool": {"filter": clauses}},
        "sort": [{"created_at": {"order": "asc", "missing": "_first"}}],
        "pit": {"id": pit, "keep_alive": keep_alive},
        "_source": {"includes": list(VIEW_SOURCE_FIELDS)},
        "track_total_hits": False,
    }
    if after is not None:
        body["search_after"] = after
    return body


def hits_of(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = response["hits"]["hits"]
    return hits


def read_hits(
    response: Mapping[str, Any], scores: dict[str, float], ranks: dict[str, int], convert: Any
) -> None:
    for rank, hit in enumerate(hits_of(response), start=1):
        scores[hit["_id"]] = convert(hit["_score"])
        ranks[hit["_id"]] = rank


def reply_body(key: tuple[str, int], clauses: list[dict[str, Any]]) -> dict[str, Any]:
    """The memory of turn ``key`` within the caller's scope and filters (at most one)."""
    return replies_body([key], clauses, size=1)


def replies_body(
    keys: Sequence[tuple[str, int]], clauses: list[dict[str, Any]], size: int | None = None
) -> dict[str, Any]:
    """The memories of the turns ``keys`` (job id, turn) within the caller's scope and
    filters: up to ``size`` (one per key when omitted)."""
    turns = [
        {"bool": {"filter": [{"term": {"job_id": job_id}}, {"term": {"turn": turn}}]}}
        for job_id, turn in keys
    ]
    which = (
        turns[0]["bool"]["filter"]
        if len(turns) == 1
        else [{"bool": {"should": turns, "minimum_should_match": 1}}]
    )
    return {
        "size": len(keys) if size is None else size,
        "_source": {"includes": list(DOC_FIELDS)},
        "query": {"bool": {"filter": [*clauses, *which]}},
    }


def entities_named_body(names: Sequence[str], clauses: list[dict[str, Any]]) -> dict[str, Any]:
    """The entities (within ``clauses``: a scope's) whose normalized text is one of
    ``names``, each with its name and linked memories."""
    return {
        "size": len(names),
        "_source": {"includes": ["normalized", "linked_memory_ids"]},
        "query": {"bool": {"filter": [*clauses, {"terms": {"normalized": list(names)}}]}},
    }


def nearest_entity_body(
    vector: Sequence[float], clauses: list[dict[str, Any]], links: bool = False
) -> dict[str, Any]:
    """The one entity (within ``clauses``) nearest ``vector``; with ``links``, its linked
    memories."""
    return {
        "knn": {
            "field": "embedding",
            "query_vector": list(vector),
            "k": 1,
            "num_candidates": 50,
            "filter": clauses,
        },
        "size": 1,
        "_source": {"includes": ["linked_memory_ids"]} if links else False,
    }
