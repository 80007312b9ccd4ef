"""The searcher's round trips on the real node: what round 1 asks beside its lists (each kNN
hit's BM25 score by a rescore that changes nothing), and a round run in the background."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from pipeline.domain.models import Scope
from pipeline.errors import PermanentError
from pipeline.serving.multihop import named_score
from pipeline.serving.rounds import Round
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


def test_a_round_started_in_the_background_answers_as_one_run_now(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    conversation(celery_app, scope)
    store = celery_app.runtime.store
    round_ = Round()
    body = {"size": 20, "_source": ["text"], "query": {"bool": {"filter": scope_filter(scope)}}}
    round_.add((0, "all"), "memories", scope, body)
    pending = round_.start(store, "test")
    assert pending() == round_.run(store, "test")
    assert len(hits_of(pending()[(0, "all")])) == 10  # the conversation's ten turns
    assert Round().start(store, "test")() == {}  # nothing to ask: no round trip


def test_a_background_round_that_fails_raises_where_its_answers_are_awaited(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    store = celery_app.runtime.store
    broken = Round()
    broken.add((0, "bad"), "memories", scope, {"query": {"no_such_query": {}}})
    pending = broken.start(store, "test")
    with pytest.raises(PermanentError, match="unknown query"):
        pending()
