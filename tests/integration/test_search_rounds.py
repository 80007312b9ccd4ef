"""The searcher's round trips on the real node: what the first asks beside its lists (each kNN
hit's BM25 score, by a rescore that changes nothing), and a memory without the ranking
columns ranked from its source."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from pipeline.domain.models import Scope
from pipeline.serving.multihop import named_score
from pipeline.serving.search import SearchQuery
from pipeline.store.columns import COLUMN_MAPPING, MENTIONS_TIME
from pipeline.store.elastic import scope_filter
from pipeline.store.queries import VECTOR_FIELDS, also_scored_by, hits_of, knn_body, vector_of
from tests.integration.test_multihop import conversation
from tests.processes import WorkerProcess
from workers.app import MemqCelery

pytestmark = pytest.mark.integration

QUESTION = {
    "should": [
        {"match": {"text": {"query": "party bakery"}}},
        {"match": {"speaker": {"query": "Jon"}}},
    ],
    "minimum_should_match": 1,
}


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="rounds", user_id=f"chat-{uuid.uuid4().hex[:8]}")


def ranked(response: dict[str, Any]) -> list[tuple[str, float]]:
    return [(h["_id"], h["_score"]) for h in hits_of(response)]


def test_each_knn_hit_carries_its_bm25_score_and_the_knn_list_is_unchanged(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    conversation(celery_app, scope)
    runtime = celery_app.runtime
    store, clauses = runtime.store, scope_filter(scope)
    [vector] = runtime.searcher.embedder.embed(["Where did Maria move from?"])
    plain = knn_body(vector, clauses, 10, fields=True)
    scored = also_scored_by(plain, QUESTION, "bm25")
    alone, both = store.search_indices(
        [("memories", scope, plain), ("memories", scope, scored)], "test", named=True
    )
    assert len(hits_of(alone)) == 10
    assert ranked(both) == ranked(alone)  # the same hits, order and scores
    ids = [memory for memory, _ in ranked(both)]
    bm25 = {
        "size": len(ids),
        "_source": False,
        "query": {"bool": {**QUESTION, "filter": [*clauses, {"ids": {"values": ids}}]}},
    }
    (by_bm25,) = store.search_indices([("memories", scope, bm25)], "test")
    expected = {h["_id"]: h["_score"] for h in hits_of(by_bm25)}
    assert len(expected) == 8  # Jon's turns (two of them with both clauses), not Maria's two
    for hit in hits_of(both):
        assert named_score(hit, "bm25") == pytest.approx(expected.get(hit["_id"], 0.0), rel=1e-5)


QUESTIONS = [
    "Where did Maria move from?",
    "When did Maria go hiking?",
    "Which bakery does Maria like?",
    "Where is the party?",
]


def test_memories_without_ranking_columns_rank_as_they_do_with_them(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    """A memory written before the ranking columns existed (``pipeline.store.columns``) is
    ranked from its source, read in one more round trip: the same hits, scores and explain.

    The same conversation is stored in two scopes and one of them written again without the
    columns; both are searched over the same index, so the same term statistics (a rewrite
    leaves its old versions in them) and the same segment (a vector's score depends on the
    segment it was quantized in)."""
    bare_scope = Scope(tenant=scope.tenant, user_id=f"{scope.user_id}-bare")
    conversation(celery_app, scope)
    conversation(celery_app, bare_scope)
    runtime = celery_app.runtime
    es, index = runtime.es, runtime.store.names.memories
    scoped = {"bool": {"filter": scope_filter(bare_scope)}}
    stored = hits_of(es.search(index=index, query=scoped, size=1000, docvalue_fields=VECTOR_FIELDS))
    for hit in stored:  # written again as before the columns: a document without them
        source = {k: v for k, v in hit["_source"].items() if k not in COLUMN_MAPPING}
        vector = vector_of(hit)  # a vector is not kept in _source: read from its doc value
        assert vector is not None
        source["embedding"] = [float(x) for x in vector]
        es.index(index=index, id=hit["_id"], document=source, routing=hit["_routing"])
    es.indices.forcemerge(index=index, max_num_segments=1)
    es.indices.refresh(index=index)
    columns = {
        "bool": {"filter": [*scope_filter(bare_scope), {"exists": {"field": MENTIONS_TIME}}]}
    }
    assert stored and es.count(index=index, query=columns)["count"] == 0

    def results(of: Scope) -> list[list[dict[str, Any]]]:
        """Each question's hits, told apart from the other scope's by their text alone."""
        found = [
            runtime.searcher.search(SearchQuery(query=q, scope=of, top_k=5, explain=True))
            for q in QUESTIONS
        ]
        hashes = {h.id: h.hash for hits in found for h in hits}
        same = [
            [
                h.model_dump(exclude={"id", "user_id", "created_at", "updated_at", "observed_at"})
                for h in hits
            ]
            for hits in found
        ]
        for hits in same:
            for hit in hits:
                why = hit["explain"]
                for key in ("reply_to", "below"):
                    why[key] = hashes.get(why[key], why[key])
                # every memory here names Maria or Jon: their entity scores tie, and ties are
                # ranked in the order the documents sit in the index, which ids set
                del why["rank_entity"]
        return same

    with_columns = results(scope)
    assert all(with_columns)
    assert results(bare_scope) == with_columns
