"""A partial search result is flagged, not hidden. A real partial result is made on the node:
a second index joins the memories alias with ``embedding`` mapped as a keyword, so the kNN
part of every search fails on that index's shard while the other shard answers (Elasticsearch
returns the hits it has and counts the failed shard). The search API then says ``partial``
with the shard counts, and the ingestion's own searches refuse to go on with half an answer."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest
from elasticsearch import Elasticsearch
from fastapi.testclient import TestClient

from api.app import create_app
from memq import AsyncClient, SearchHits
from pipeline.config import Settings
from pipeline.domain.models import Scope
from pipeline.errors import TransientError
from pipeline.memory import Memory
from pipeline.store.indices import drop_indices
from workers.app import MemqCelery, create_celery
from workers.runtime import Runtime

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def private(settings: Settings, es: Elasticsearch) -> Iterator[Settings]:
    """The test settings on an index prefix of their own (a rogue index joins its alias)."""
    es_config = settings.es.model_copy(
        update={"index_prefix": f"{settings.es.index_prefix}-partial"}
    )
    mine = settings.model_copy(update={"es": es_config})
    runtime = Runtime(mine)
    yield mine
    drop_indices(es, runtime.store.names)


@pytest.fixture(scope="module")
def app(private: Settings) -> Iterator[MemqCelery]:
    """A Celery app over the private prefix: the API's runtime (store, searcher) is its."""
    app = create_celery(private)
    yield app
    app.close()


@pytest.fixture(scope="module")
def runtime(app: MemqCelery) -> Runtime:
    return app.runtime


@pytest.fixture(scope="module")
def client(private: Settings, app: MemqCelery) -> Iterator[TestClient]:
    with TestClient(create_app(private, app)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def tenant(runtime: Runtime) -> str:
    tenant = f"partial-{uuid.uuid4().hex[:8]}"
    memory = Memory(runtime.deps, tenant=tenant)
    memory.add("I play chess on Sundays", user_id="alice", infer=False)
    memory.add("I play chess at the club", agent_id="coach", infer=False)
    return tenant


@pytest.fixture
def headers(client: TestClient, private: Settings, tenant: str) -> dict[str, str]:
    admin = private.api.admin_key
    assert admin is not None, "the tests need MEMQ_API_ADMIN_KEY (ops/test sets it)"
    created = client.post(
        "/v1/admin/keys",
        json={"tenant": tenant},
        headers={"authorization": f"Bearer {admin.get_secret_value()}"},
    )
    assert created.status_code == 201, created.text
    return {"authorization": f"Bearer {created.json()['key']}"}


@pytest.fixture
def rogue_shard(es: Elasticsearch, runtime: Runtime, tenant: str) -> Iterator[None]:
    """A one-shard index behind the memories alias on which every kNN query fails."""
    names = runtime.store.names
    rogue = f"{names.memories}-rogue"
    es.indices.create(
        index=rogue,
        settings={"number_of_shards": 1, "number_of_replicas": 0},
        mappings={
            "properties": {
                "tenant": {"type": "keyword"},
                "user_id": {"type": "keyword"},
                "agent_id": {"type": "keyword"},
                "embedding": {"type": "keyword"},
                "text": {"type": "text"},
            }
        },
    )
    es.index(
        index=rogue,
        document={"tenant": tenant, "user_id": "alice", "embedding": "x", "text": "rogue"},
        refresh="wait_for",
    )
    es.indices.update_aliases(actions=[{"add": {"index": rogue, "alias": names.memories}}])
    try:
        yield
    finally:
        es.indices.delete(index=rogue)


def search(client: TestClient, headers: dict[str, str], path: str, **body: object) -> dict:  # type: ignore[type-arg]
    response = client.post(path, json={"query": "chess", **body}, headers=headers)
    assert response.status_code == 200, response.text
    found: dict = response.json()  # type: ignore[type-arg]
    return found


def test_a_whole_result_says_so(client: TestClient, headers: dict[str, str]) -> None:
    found = search(client, headers, "/v1/memories/search", user_id="alice")
    assert found["partial"] is False
    assert found["shards"] == {"total": 1, "successful": 1, "failed": 0, "timed_out": False}
    assert [hit["memory"] for hit in found["results"]] == ["I play chess on Sundays"]
    mem0 = search(client, headers, "/v3/memories/search/", filters={"user_id": "alice"})
    assert "partial" not in mem0 and len(mem0["results"]) == 1


@pytest.mark.usefixtures("rogue_shard")
def test_a_result_missing_a_shard_is_flagged_with_the_counts(
    client: TestClient, headers: dict[str, str]
) -> None:
    found = search(client, headers, "/v1/memories/search", user_id="alice")
    assert found["partial"] is True
    assert found["shards"] == {"total": 2, "successful": 1, "failed": 1, "timed_out": False}
    assert [hit["memory"] for hit in found["results"]] == ["I play chess on Sundays"]
    batch = client.post(
        "/v1/memories/search/batch",
        json={"queries": [{"query": "chess", "user_id": "alice"}]},
        headers=headers,
    ).json()
    assert batch["partial"] is True and batch["shards"][0]["failed"] == 1
    mem0 = search(client, headers, "/v3/memories/search/", filters={"user_id": "alice"})
    assert mem0["partial"] is True and mem0["shards"]["failed"] == 1


def test_the_in_process_memory_keeps_mem0s_shape_when_whole(runtime: Runtime, tenant: str) -> None:
    whole = Memory(runtime.deps, tenant=tenant).search("chess", user_id="alice")
    assert "partial" not in whole and len(whole["results"]) == 1


@pytest.mark.usefixtures("rogue_shard")
def test_the_in_process_memory_flags_a_partial_result_the_mem0_way(
    runtime: Runtime, tenant: str
) -> None:
    """``Memory.search`` (the in-process drop-in) says ``partial`` with the counts when a
    shard failed, as the API's mem0 routes do."""
    found = Memory(runtime.deps, tenant=tenant).search("chess", user_id="alice")
    assert found["partial"] is True and found["shards"]["failed"] == 1
    assert [hit["memory"] for hit in found["results"]] == ["I play chess on Sundays"]


@pytest.mark.usefixtures("rogue_shard")
def test_the_sdk_hands_the_flag_to_its_caller(client: TestClient, headers: dict[str, str]) -> None:
    """``memq.AsyncClient`` against the same app (over ASGI, not a socket): the hits are a
    list, which also says it is partial, per query in a batch too."""

    async def scenario() -> tuple[SearchHits, list[SearchHits]]:
        transport = httpx.ASGITransport(app=client.app)
        key = headers["authorization"].removeprefix("Bearer ")
        async with AsyncClient("http://memq.test", key, transport=transport) as sdk:
            one = await sdk.search("chess", user_id="alice")
            many = await sdk.search_many([{"query": "chess", "user_id": "alice"}])
            return one, many

    one, many = asyncio.run(scenario())

    assert [hit.memory for hit in one] == ["I play chess on Sundays"]
    assert one.partial is True and one.shards is not None and one.shards.failed == 1
    assert many[0].partial is True and [hit.memory for hit in many[0]] == [one[0].memory]


@pytest.mark.usefixtures("rogue_shard")
def test_ingestion_does_not_go_on_with_half_an_answer(runtime: Runtime, tenant: str) -> None:
    """A dedup or retrieval that missed a shard could miss a duplicate: retried instead."""
    scope = Scope(tenant=tenant, user_id="alice")
    vector = runtime.deps.embedder.embed(["chess"])[0]
    with pytest.raises(TransientError, match="shard"):
        runtime.store.similar_memories(scope, vector, 5)
