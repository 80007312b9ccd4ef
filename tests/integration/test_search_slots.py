"""A tenant's searches in flight, on the real Elasticsearch and Redis: one tenant holding all
its search slots gets 429 with Retry-After for the next, while another tenant searches on."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from pipeline.config import Settings
from pipeline.domain.models import Scope
from pipeline.store.indices import IndexNames
from tests.integration.test_api_guards import assert_429, tenant_headers
from tests.integration.test_rerank import RerankServer
from tests.integration.test_search import put
from workers.app import MemqCelery
from workers.runtime import Runtime
from workers.serving import CeleryIntake

pytestmark = pytest.mark.integration


class HeldReranker:
    """A reranker that answers only once released: a search that asks it stays in flight."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()
        self.server = RerankServer(self.answer)

    def answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        self.asked.set()
        self.release.wait(60)
        texts = body.get("documents") or []
        return 200, {"results": [{"index": i, "relevance_score": 0.5} for i in range(len(texts))]}


@pytest.fixture(scope="module")
def reranker() -> Iterator[HeldReranker]:
    held = HeldReranker()
    yield held
    held.release.set()
    held.server.server.shutdown()
    held.server.server.server_close()


@pytest.fixture(scope="module")
def client(
    settings: Settings, celery_app: MemqCelery, indices: IndexNames, reranker: HeldReranker
) -> Iterator[TestClient]:
    api = settings.api.model_copy(update={"search_slots_per_tenant": 1})
    rerank = settings.rerank.model_copy(update={"url": reranker.server.url})
    app = create_app(
        settings.model_copy(update={"api": api, "rerank": rerank}), CeleryIntake(celery_app)
    )
    with TestClient(app) as test_client:
        yield test_client


def test_a_tenant_with_every_search_slot_held_waits_and_no_other_tenant_does(
    client: TestClient, settings: Settings, reranker: HeldReranker
) -> None:
    reranker.asked.clear()
    reranker.release.clear()
    tenant = f"slots-{uuid.uuid4().hex[:8]}"
    busy, other = tenant_headers(client, tenant), tenant_headers(client)
    user = "u1"
    put(Runtime(settings), Scope(tenant=tenant, user_id=user), "likes tea")
    body = {"query": "tea", "user_id": user}
    held: list[Any] = []
    search = {**body, "rerank": True}
    running = threading.Thread(
        target=lambda: held.append(client.post("/v1/memories/search", json=search, headers=busy))
    )
    running.start()
    try:
        assert reranker.asked.wait(60), "the first search never reached the reranker"
        refused = client.post("/v1/memories/search", json=body, headers=busy)
        assert_429(refused)
        assert "hold its 1 search slots" in refused.json()["error"]["message"]
        batch = client.post("/v1/memories/search/batch", json={"queries": [body]}, headers=busy)
        assert_429(batch)
        mem0 = client.post(
            "/v3/memories/search/",
            json={"query": "tea", "filters": {"user_id": user}},
            headers=busy,
        )
        assert_429(mem0)
        assert client.post("/v1/memories/search", json=body, headers=other).status_code == 200
        scans = {"OR": [{f: {"icontains": "abc"}} for f in ("agent_id", "run_id", "job_id")]}
        heavy = {**body, "filters": scans}  # 2 slots of 1: it runs, as nothing else of its tenant
        assert client.post("/v1/memories/search", json=heavy, headers=other).status_code == 200
    finally:
        reranker.release.set()
        running.join(60)
    assert held[0].status_code == 200, held[0].text
    assert client.post("/v1/memories/search", json=body, headers=busy).status_code == 200


def test_a_search_waits_for_a_slot_its_tenant_gives_back_in_time(
    client: TestClient, settings: Settings, reranker: HeldReranker
) -> None:
    """The next search of a tenant whose slots are all held waits (up to
    ``MEMQ_API_SEARCH_SLOT_WAIT_S``) and is answered once the running one ends, not refused."""
    reranker.asked.clear()
    reranker.release.clear()
    tenant = f"slots-{uuid.uuid4().hex[:8]}"
    headers = tenant_headers(client, tenant)
    put(Runtime(settings), Scope(tenant=tenant, user_id="u1"), "likes tea")
    body = {"query": "tea", "user_id": "u1"}
    answers: dict[str, Any] = {}

    def send(name: str, search: dict[str, Any]) -> None:
        answers[name] = client.post("/v1/memories/search", json=search, headers=headers)

    first = threading.Thread(target=send, args=("first", {**body, "rerank": True}))
    first.start()
    try:
        assert reranker.asked.wait(60), "the first search never reached the reranker"
        second = threading.Thread(target=send, args=("second", body))
        second.start()
        threading.Event().wait(0.3)  # the second is waiting for the slot by now
        assert "second" not in answers
        reranker.release.set()
        second.join(30)
    finally:
        reranker.release.set()
        first.join(60)
    assert answers["first"].status_code == 200, answers["first"].text
    assert answers["second"].status_code == 200, answers["second"].text
