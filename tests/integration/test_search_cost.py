"""A tenant's costly search work per second, on the real Elasticsearch and Redis: searches
with substring conditions (or long in/nin lists, rerank, many hits) are charged units against
the tenant's budget on every search surface, and once it is spent the next costly one is 429
with Retry-After and why, while the same tenant's plain searches and another tenant's costly
ones are answered."""

from __future__ import annotations

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
from tests.integration.test_search import put
from workers.app import MemqCelery
from workers.runtime import Runtime
from workers.serving import CeleryIntake

pytestmark = pytest.mark.integration

SCANS = {"OR": [{f: {"icontains": "abc"}} for f in ("agent_id", "run_id", "actor_id", "job_id")]}
"""Four substring conditions: 4 units."""
SPENT = "units of costly search work"


@pytest.fixture(scope="module")
def client(settings: Settings, celery_app: MemqCelery, indices: IndexNames) -> Iterator[TestClient]:
    api = settings.api.model_copy(
        # 10 units per 5 s: two searches of SCANS fit in a window even on a busy machine
        update={"search_cost_per_s": 2, "rate_window_s": 5}
    )
    app = create_app(settings.model_copy(update={"api": api}), CeleryIntake(celery_app))
    with TestClient(app) as test_client:
        yield test_client


def tenant(client: TestClient, settings: Settings) -> tuple[dict[str, str], dict[str, Any]]:
    """A new tenant's headers, and a search body of a user of it who has a memory."""
    name = f"cost-{uuid.uuid4().hex[:8]}"
    put(Runtime(settings), Scope(tenant=name, user_id="u1"), "likes tea")
    return tenant_headers(client, name), {"query": "tea", "user_id": "u1"}


def test_costly_searches_over_the_budget_are_429_on_every_route(
    client: TestClient, settings: Settings
) -> None:
    headers, body = tenant(client, settings)
    costly = {**body, "filters": SCANS}
    for _ in range(2):
        answered = client.post("/v1/memories/search", json=costly, headers=headers)
        assert answered.status_code == 200, answered.text
    refused = client.post("/v1/memories/search", json=costly, headers=headers)
    assert_429(refused)
    assert int(refused.headers["retry-after"]) <= 5
    assert f"over 10 {SPENT}" in refused.json()["error"]["message"]
    batch = client.post("/v1/memories/search/batch", json={"queries": [costly]}, headers=headers)
    assert_429(batch)
    mem0 = {"query": "tea", "filters": {"user_id": "u1", "AND": [SCANS]}}
    assert_429(client.post("/v3/memories/search/", json=mem0, headers=headers))
    # the tenant's plain searches cost no units, and another tenant has a budget of its own
    assert client.post("/v1/memories/search", json=body, headers=headers).status_code == 200
    other, other_body = tenant(client, settings)
    other_costly = {**other_body, "filters": SCANS}
    assert client.post("/v1/memories/search", json=other_costly, headers=other).status_code == 200


def test_a_batch_search_costs_the_sum_of_its_queries(
    client: TestClient, settings: Settings
) -> None:
    headers, body = tenant(client, settings)
    costly = {**body, "filters": SCANS}
    answered = client.post(
        "/v1/memories/search/batch", json={"queries": [costly, costly]}, headers=headers
    )
    assert answered.status_code == 200, answered.text
    assert_429(client.post("/v1/memories/search", json=costly, headers=headers))
