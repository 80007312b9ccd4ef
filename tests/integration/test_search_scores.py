"""Scores people can threshold: ``score`` is on the similarity scale, through the searcher,
memq's route and mem0's route (``pipeline.serving.fusion.on_similarity_scale``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from pipeline.domain.models import Scope
from pipeline.serving.search import SearchQuery
from pipeline.store.elastic import ElasticStore
from tests.integration.test_api import Tenant, remember, temporary_tenant, wait_listed
from tests.integration.test_replies import ANSWER, ASKED, QUESTION, chat
from workers.app import MemqCelery

pytestmark = pytest.mark.integration

MEM0_THRESHOLD = 0.3  # what mem0 users set on cosine-like scores


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="scores", user_id=f"chat-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def tenant(api_url: str) -> Iterator[Tenant]:
    with temporary_tenant(api_url, "scores") as created:
        yield created


def test_a_mem0_threshold_keeps_the_answer_and_its_question(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope
) -> None:
    chat(celery_app, store, scope)
    searcher = celery_app.runtime.searcher
    asked = SearchQuery(query=QUESTION, scope=scope, explain=True)
    every = searcher.search(asked)
    kept = searcher.search(asked.model_copy(update={"threshold": MEM0_THRESHOLD}))
    assert [h.memory for h in kept[:2]] == [ASKED, ANSWER]  # the answer's own words differ
    assert kept[1].explain is not None and kept[1].explain.semantic < MEM0_THRESHOLD
    assert [h.id for h in kept] == [h.id for h in every if h.score >= MEM0_THRESHOLD]
    assert 0 < len(kept) < len(every)
    for hit in every:
        assert hit.explain is not None and 0 <= hit.score <= 1
        assert hit.score >= hit.explain.semantic  # at least its own similarity
    assert every[-1].explain is not None and every[-1].score == every[-1].explain.semantic


def test_nothing_like_the_question_is_nothing_above_a_mem0_threshold(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope
) -> None:
    chat(celery_app, store, scope)
    query = SearchQuery(
        query="quarterly tax filing deadline for corporations",
        scope=scope,
        threshold=MEM0_THRESHOLD,
    )
    assert celery_app.runtime.searcher.search(query) == []


def test_both_routes_apply_the_threshold_to_the_similarity_scale(tenant: Tenant) -> None:
    a, uid = tenant, f"user-{uuid.uuid4().hex[:12]}"
    remember(a, uid, "I drink green tea every morning")
    remember(a, uid, "The quarterly report is due on Friday")
    wait_listed(a, uid, 2)
    body = {"query": "what tea do I drink", "user_id": uid, "explain": True}
    every = a.http.post("/v1/memories/search", json=body).json()["results"]
    assert [h["explain"]["rank"] for h in every] == [1, 2]
    assert every[0]["score"] >= MEM0_THRESHOLD > every[1]["score"]
    cut = {**body, "threshold": MEM0_THRESHOLD}
    ours = a.http.post("/v1/memories/search", json=cut).json()["results"]
    mem0 = {"query": "what tea do I drink", "filters": {"user_id": uid}}
    theirs = a.http.post("/v3/memories/search/", json={**mem0, "threshold": MEM0_THRESHOLD})
    assert theirs.status_code == 200, theirs.text
    assert [h["id"] for h in ours] == [h["id"] for h in theirs.json()["results"]]
    assert [h["memory"] for h in ours] == ["I drink green tea every morning"]
    assert theirs.json()["results"][0]["score"] == pytest.approx(every[0]["score"])
