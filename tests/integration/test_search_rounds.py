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

    The same conversation is stored in two scopes, and both are written again in one bulk, in
    pairs, one of them without the columns. Both are then searched over the same index, the
    same term statistics (a rewrite leaves its old versions in them) and the same segment: a
    vector's int8 score depends on the quantiles of the segment it was quantized in, and a merge
    may keep a segment's quantized bytes, so two copies of one vector written apart can score a
    little apart, which turns near ties around."""
    bare_scope = Scope(tenant=scope.tenant, user_id=f"{scope.user_id}-bare")
    conversation(celery_app, scope)
    conversation(celery_app, bare_scope)
    runtime = celery_app.runtime
    es, index = runtime.es, runtime.store.names.memories

    def stored(of: Scope) -> dict[str, dict[str, Any]]:
        query = {"bool": {"filter": scope_filter(of)}}
        found = es.search(index=index, query=query, size=1000, docvalue_fields=VECTOR_FIELDS)
        return {hit["_source"]["hash"]: hit for hit in hits_of(found)}

    kept, bare = stored(scope), stored(bare_scope)
    assert kept and kept.keys() == bare.keys()
    operations: list[dict[str, Any]] = []
    for key in sorted(kept):
        for hit, keep_columns in ((kept[key], True), (bare[key], False)):
            source = {
                k: v for k, v in hit["_source"].items() if keep_columns or k not in COLUMN_MAPPING
            }
            vector = vector_of(hit)  # a vector is not kept in _source: read from its doc value
            assert vector is not None
            source["embedding"] = [float(x) for x in vector]
            operations += [{"index": {"_id": hit["_id"], "routing": hit["_routing"]}}, source]
    # no scheduled refresh in the middle of the bulk: every rewritten copy in one segment
    interval = es.indices.get_settings(index=index, name="index.refresh_interval")
    # (a setting left at its default is not listed: None puts the default back)
    listed = [i["settings"]["index"]["refresh_interval"] for i in interval.body.values()]
    before = listed[0] if listed else None
    es.indices.put_settings(index=index, settings={"index": {"refresh_interval": "-1"}})
    try:
        written = es.bulk(index=index, operations=operations)
        assert not written["errors"]
        es.indices.refresh(index=index)
    finally:
        es.indices.put_settings(index=index, settings={"index": {"refresh_interval": before}})
    columns = {
        "bool": {"filter": [*scope_filter(bare_scope), {"exists": {"field": MENTIONS_TIME}}]}
    }
    assert es.count(index=index, query=columns)["count"] == 0

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
                # ranked in the order the entity's links were stored, each scope's own
                del why["rank_entity"]
        return same

    with_columns = results(scope)
    assert all(with_columns)
    assert results(bare_scope) == with_columns
