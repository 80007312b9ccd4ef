"""Translated filters run against the real Elasticsearch node, as a BM25-style ``bool.filter``
and as the ``filter`` of a kNN clause: both must return exactly the expected memories."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.store.filters import metadata_pairs, translate_filters, with_substrings
from pipeline.store.indices import IndexNames
from pipeline.store.routing import source_routing

pytestmark = pytest.mark.integration

USER = f"filters-{uuid.uuid4().hex[:10]}"

# (agent_id, role, memory_type, text, metadata, created_at, expiration_date)
_DOCS: list[tuple[str, str, str, str, dict[str, Any], str, str | None]] = [
    ("travel-bot", "user", "semantic", "Likes green tea in the morning",
     {"category": "food", "rank": 3, "flags": {"vip": True}}, "2024-01-05T09:00:00Z", None),
    ("Travel-Planner", "assistant", "semantic", "Booked a flight to Paris for May",
     {"category": "travel", "place": {"city": "Paris"}}, "2024-01-20T00:00:00Z", None),
    ("coach", "user", "episodic", "Ran ten kilometres on Sunday",
     {"category": "sport", "rank": 10}, "2024-02-03T00:00:00Z", None),
    ("coach", "user", "semantic", "Is allergic to peanuts",
     {"category": "food", "severity": "high"}, "2024-02-15T12:00:00Z", "2025-01-01T00:00:00Z"),
    ("travel-bot", "user", "semantic", "Prefers aisle seats on long flights",
     {"category": "travel", "tags": ["flight", "seat"]}, "2024-03-01T00:00:00Z", None),
    ("coach", "assistant", "procedural", "Always answer with a training plan",
     {}, "2024-03-10T00:00:00Z", "2024-06-01T00:00:00Z"),
    ("helper", "tool", "semantic", "Has a cat named Tea Cup",
     {"category": "pets"}, "2024-03-20T00:00:00Z", None),
    ("helper", "user", "semantic", "Owns an old bicycle",
     {"category": "hobby"}, "2024-04-02T00:00:00Z", None),
    ("travel-bot", "user", "episodic", "Visited Lisbon last spring",
     {"category": "travel", "place": {"city": "Lisbon"}}, "2024-04-15T00:00:00Z",
     "2030-01-01T00:00:00Z"),
    ("coach", "user", "semantic", "Drinks black coffee",
     {"category": "food", "rank": "2"}, "2024-05-01T00:00:00Z", None),
    ("helper", "assistant", "semantic", "Speaks Portuguese and English",
     {"languages": "pt,en"}, "2024-05-20T00:00:00Z", None),
    ("helper", "user", "episodic", "Moved to a new flat in June",
     {"note": "moved"}, "2024-06-30T00:00:00Z", None),
]  # fmt: skip
_HASHES = {6: "abc*def?ghi", 7: "abcXdefYghi"}
ALL = set(range(len(_DOCS)))


def _document(i: int, dims: int) -> dict[str, Any]:
    agent, role, kind, text, metadata, created, expires = _DOCS[i]
    document = {
        "tenant": "default",
        "user_id": USER,
        "agent_id": agent,
        "run_id": f"run-{'abc'[i // 4]}",
        "role": role,
        "memory_type": f"{kind}_memory",
        "text": text,
        "text_lemmatized": text.lower(),
        "hash": _HASHES.get(i, f"hash-{i}"),
        "metadata": metadata,
        "metadata_kv": metadata_pairs(metadata),
        "created_at": created,
        "observed_at": created,
        "embedding": [1.0 if d == i else 0.0 for d in range(dims)],
    }
    if expires is not None:
        document["expiration_date"] = expires
    return with_substrings(document)


@pytest.fixture(scope="module")
def memories(es: Elasticsearch, indices: IndexNames, settings: Settings) -> str:
    """The memories index holding this module's documents (one unit vector each)."""
    for i in range(len(_DOCS)):
        es.index(
            index=indices.memories,
            id=f"{USER}-{i}",
            document=_document(i, settings.embedder.dims),
            routing=source_routing(_document(i, settings.embedder.dims)),
            refresh="wait_for",
        )
    return indices.memories


def _scope() -> list[dict[str, Any]]:
    return [{"term": {"tenant": "default"}}, {"term": {"user_id": USER}}]


def _numbers(hits: list[dict[str, Any]]) -> set[int]:
    return {int(hit["_id"].rsplit("-", 1)[1]) for hit in hits}


def _bool_search(es: Elasticsearch, index: str, clauses: list[dict[str, Any]]) -> set[int]:
    query = {"bool": {"filter": [*_scope(), *clauses]}}
    return _numbers(es.search(index=index, query=query, size=50)["hits"]["hits"])


def _knn_search(
    es: Elasticsearch, index: str, clauses: list[dict[str, Any]], dims: int
) -> set[int]:
    """kNN with the filter inside; the query vector is equally close to every document."""
    vector = [1.0 / math.sqrt(len(_DOCS)) if d < len(_DOCS) else 0.0 for d in range(dims)]
    knn = {
        "field": "embedding",
        "query_vector": vector,
        "k": 50,
        "num_candidates": 100,
        "filter": [*_scope(), *clauses],
    }
    return _numbers(es.search(index=index, knn=knn, size=50)["hits"]["hits"])


CASES: list[tuple[str, dict[str, Any], set[int]]] = [
    ("eq", {"role": "assistant"}, {1, 5, 10}),
    ("eq-op", {"role": {"eq": "tool"}}, {6}),
    ("ne", {"role": {"ne": "user"}}, {1, 5, 6, 10}),
    ("in", {"memory_type": {"in": ["episodic_memory", "procedural_memory"]}}, {2, 5, 8, 11}),
    ("nin", {"memory_type": {"nin": ["semantic_memory"]}}, {2, 5, 8, 11}),
    ("fields-anded", {"agent_id": "travel-bot", "memory_type": "episodic_memory"}, {8}),
    ("keyword-gt", {"run_id": {"gt": "run-a"}}, ALL - {0, 1, 2, 3}),
    ("keyword-lte", {"run_id": {"lte": "run-b"}}, set(range(8))),
    ("date-window", {"created_at": {"gte": "2024-02-01", "lt": "2024-03-01"}}, {2, 3}),
    ("date-gt-lte", {"created_at": {"gt": "2024-02-03T00:00:00Z", "lte": "2024-03-01"}}, {3, 4}),
    ("date-lt-excludes", {"created_at": {"lt": "2024-01-20"}}, {0}),
    ("date-lte-includes", {"created_at": {"lte": "2024-01-20"}}, {0, 1}),
    ("date-eq", {"created_at": "2024-02-03T01:00:00+01:00"}, {2}),
    ("date-in", {"created_at": {"in": ["2024-02-03", "2024-03-01T00:00:00+00:00"]}}, {2, 4}),
    ("date-datetime", {"observed_at": {"gte": datetime(2024, 6, 1, tzinfo=UTC)}}, {11}),
    ("date-ne", {"created_at": {"ne": "2024-01-05T09:00:00Z"}}, ALL - {0}),
    ("exists", {"expiration_date": "*"}, {3, 5, 8}),
    ("not-exists", {"NOT": {"expiration_date": "*"}}, ALL - {3, 5, 8}),
    ("expires-after", {"expiration_date": {"gt": "2025-06-01"}}, {8}),
    ("meta-alias", {"category": "food"}, {0, 3, 9}),
    ("meta-dotted", {"metadata.category": "food"}, {0, 3, 9}),
    ("meta-nested", {"metadata.place.city": "Paris"}, {1}),
    ("meta-alias-nested", {"place.city": {"in": ["Lisbon", "Rome"]}}, {8}),
    ("meta-bool", {"metadata.flags.vip": True}, {0}),
    ("meta-array", {"tags": "seat"}, {4}),
    ("meta-number", {"rank": 10}, {2}),
    ("meta-in-mixed", {"rank": {"in": [3, "2"]}}, {0, 9}),
    ("meta-range-lexicographic", {"rank": {"gte": 2}}, {0, 9}),
    ("meta-ne", {"category": {"ne": "food"}}, ALL - {0, 3, 9}),
    ("meta-nin", {"category": {"nin": ["food", "travel"]}}, {2, 5, 6, 7, 10, 11}),
    ("meta-exists", {"category": "*"}, ALL - {5, 10, 11}),
    ("meta-any-value-icontains", {"metadata": {"icontains": "LISB"}}, {8}),
    ("meta-key-icontains", {"metadata.place.city": {"icontains": "PAR"}}, {1}),
    ("meta-key-contains-miss", {"metadata.place.city": {"contains": "PAR"}}, set()),
    ("meta-top-level-contains", {"category": {"contains": "ood"}}, {0, 3, 9}),
    ("meta-any-value-contains", {"metadata": {"contains": "move"}}, {11}),
    ("contains", {"agent_id": {"contains": "travel"}}, {0, 4, 8}),
    ("icontains", {"agent_id": {"icontains": "travel"}}, {0, 1, 4, 8}),
    ("icontains-upper", {"agent_id": {"icontains": "PLANNER"}}, {1}),
    ("contains-escapes-star", {"hash": {"contains": "c*d"}}, {6}),
    ("contains-escapes-question", {"hash": {"contains": "f?g"}}, {6}),
    ("icontains-keyword", {"hash": {"icontains": "XDEF"}}, {7}),
    ("text-contains", {"text": {"contains": "green tea"}}, {0}),
    ("text-icontains", {"text": {"icontains": "GREEN TEA"}}, {0}),
    ("text-word", {"text": {"contains": "tea"}}, {0, 6}),
    ("text-phrase-order", {"text": {"contains": "tea green"}}, set()),
    ("text-exists", {"text": "*"}, ALL),
    (
        "or-of-and",
        {
            "OR": [
                {"AND": [{"category": "food"}, {"created_at": {"gte": "2024-02-01"}}]},
                {"role": "tool"},
            ]
        },
        {3, 6, 9},
    ),
    ("not-list", {"NOT": [{"category": "food"}, {"category": "travel"}]}, {2, 5, 6, 7, 10, 11}),
    (
        "and-not",
        {"AND": [{"agent_id": "coach"}, {"NOT": {"memory_type": "semantic_memory"}}]},
        {2, 5},
    ),
    ("lower-case", {"or": [{"role": "tool"}, {"not": {"category": "*"}}]}, {5, 6, 10, 11}),
    (
        "deep",
        {
            "NOT": {
                "NOT": {
                    "OR": [
                        {"run_id": "run-c"},
                        {"AND": [{"run_id": "run-a"}, {"role": "assistant"}]},
                    ]
                }
            }
        },
        {1, 8, 9, 10, 11},
    ),
    ("mixed-node", {"agent_id": "helper", "OR": [{"role": "tool"}, {"note": "*"}]}, {6, 11}),
]


@pytest.mark.parametrize(("filters", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_filter_selects_the_same_memories_in_bool_and_knn(
    es: Elasticsearch,
    memories: str,
    settings: Settings,
    filters: dict[str, Any],
    expected: set[int],
) -> None:
    clauses = translate_filters(filters)
    assert _bool_search(es, memories, clauses) == expected
    assert _knn_search(es, memories, clauses, settings.embedder.dims) == expected


def test_no_filter_selects_every_memory_of_the_scope(
    es: Elasticsearch, memories: str, settings: Settings
) -> None:
    assert _bool_search(es, memories, translate_filters(None)) == ALL
    assert _knn_search(es, memories, translate_filters({}), settings.embedder.dims) == ALL
