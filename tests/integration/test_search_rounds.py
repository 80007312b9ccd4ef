"""The searcher's first round trip on the real node: what it asks beside its lists (each kNN
hit's BM25 score, by a rescore that changes nothing)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from pipeline.domain.models import Scope
from pipeline.serving.multihop import named_score
from pipeline.store.elastic import scope_filter
from pipeline.store.queries import also_scored_by, hits_of, knn_body
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
