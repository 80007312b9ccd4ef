"""Forgetting is complete: after ``DELETE /v1/users/{id}`` a marker the user sent is in no
Elasticsearch index and no Redis key (nor is the vector of a queued turn embedded ahead), on
the real stack with a real worker."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from elasticsearch import Elasticsearch
from elasticsearch.helpers import scan
from fastapi.testclient import TestClient

from api.app import create_app
from pipeline.config import Settings
from pipeline.domain.jobs import JobStatus, job_record
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.domain.state import JobState
from pipeline.features.chat import ChatEvent
from pipeline.store.indices import IndexNames
from tests.doubles import HashEmbedder
from tests.processes import WorkerProcess
from workers.app import MemqCelery
from workers.serving import celery_intake

pytestmark = pytest.mark.integration

TENANT = f"erase-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def client(
    settings: Settings, celery_app: MemqCelery, worker: WorkerProcess
) -> Iterator[TestClient]:
    chat = settings.chat.model_copy(update={"tenant": TENANT})
    # the intake is made from the app's own settings, chat tenant included (as in production)
    app = create_app(settings.model_copy(update={"chat": chat}), celery_intake)
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def headers(client: TestClient, settings: Settings) -> dict[str, str]:
    admin = settings.api.admin_key
    assert admin is not None, "the tests need MEMQ_API_ADMIN_KEY (ops/test sets it)"
    created = client.post(
        "/v1/admin/keys",
        json={"tenant": TENANT},
        headers={"authorization": f"Bearer {admin.get_secret_value()}"},
    )
    assert created.status_code == 201, created.text
    return {"authorization": f"Bearer {created.json()['key']}"}


def places_with(marker: str, es: Elasticsearch, names: IndexNames, client: redis.Redis) -> set[str]:
    """Every index and Redis key (of this test run) whose content holds ``marker``."""
    found = set()
    es.indices.refresh(index=f"{names.prefix}-*")
    for hit in scan(es, index=f"{names.prefix}-*", query={"query": {"match_all": {}}}):
        if marker in json.dumps(hit["_source"]):
            found.add(f"es:{hit['_index']}")
    for key in client.scan_iter(match=f"memq:{names.prefix}:*", count=1000):
        if marker in redis_value(client, key):
            found.add(f"redis:{key.decode()}")
    return found


def redis_value(client: redis.Redis, key: bytes) -> str:
    kind = client.type(key).decode()
    value: Any = {
        "string": lambda: client.get(key),
        "list": lambda: client.lrange(key, 0, -1),
        "hash": lambda: client.hgetall(key),
        "set": lambda: client.smembers(key),
        "zset": lambda: client.zrange(key, 0, -1),
    }.get(kind, lambda: b"")()
    return repr(value)


def test_erasing_a_user_leaves_their_words_nowhere(
    client: TestClient,
    headers: dict[str, str],
    celery_app: MemqCelery,
    es: Elasticsearch,
    indices: IndexNames,
    redis_client: redis.Redis,
) -> None:
    marker = f"Quokka{uuid.uuid4().hex[:12]}"
    user, bystander = f"u-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    runtime = celery_app.runtime
    for who, agent in ((user, None), (user, "helper"), (bystander, None)):
        added = client.post(
            "/v1/memories",
            params={"wait": "true"},
            json={
                "user_id": who,
                "agent_id": agent,
                "infer": False,
                "messages": [
                    {"role": "user", "content": f"My pet is called {marker} Smith."},
                    {"role": "user", "content": f"{marker} Smith likes Lisbon."},
                ],
            },
            headers=headers,
        )
        assert added.status_code == 200 and added.json()["status"] == JobStatus.SUCCEEDED, (
            added.text
        )
    mine = client.get("/v1/memories", params={"user_id": user}, headers=headers).json()
    deleted = client.delete(f"/v1/memories/{mine['results'][0]['id']}", headers=headers)
    assert deleted.status_code == 200  # its DELETE history row keeps the text
    queued = queued_job(celery_app, Scope(tenant=TENANT, user_id=user), marker)
    # the queued job's turn, embedded ahead as a worker does while jobs ahead of it run
    kept = runtime.shared_vectors(HashEmbedder())
    assert kept.embed_ahead([marker]) == 1 and redis_client.exists(kept.key(marker))
    runtime.chat_buffer.push(chat_event(user, marker), runtime.clock(), 10)

    before = places_with(marker, es, indices, redis_client)
    for place in ("memories", "history", "messages", "jobs"):
        assert any(f"-{place}" in p for p in before), (place, before)
    assert any(p.startswith("redis:") and queued in p for p in before), before
    assert any(":chat:" in p for p in before), before

    erased = client.delete(f"/v1/users/{user}", headers=headers)
    assert erased.status_code == 200, erased.text
    counts = erased.json()["erased"]
    assert counts["memories"] == 3 and counts["jobs"] == 3 and counts["chat_buffered"] == 1

    left = places_with(marker, es, indices, redis_client)
    # only the bystander's own documents still hold the marker
    assert all("redis:" not in p for p in left), left
    assert not redis_client.exists(kept.key(marker))  # the vector of its turn too
    bystander_docs = client.get("/v1/memories", params={"user_id": bystander}, headers=headers)
    assert len(bystander_docs.json()["results"]) == 2
    assert user_documents(es, indices, user) == []
    again = client.delete(f"/v1/users/{user}", headers=headers)
    assert again.status_code == 200 and again.json()["erased"]["memories"] == 0
    # mem0's client.delete_users(user_id=...) reaches the same erasure
    mem0 = client.delete(f"/v2/entities/user/{bystander}/", headers=headers)
    assert mem0.status_code == 200 and mem0.json()["erased"]["memories"] == 2
    assert user_documents(es, indices, bystander) == []
    assert places_with(marker, es, indices, redis_client) == set()  # both gone: nowhere at all


def user_documents(es: Elasticsearch, names: IndexNames, user: str) -> list[str]:
    """Ids of documents anywhere in the run's indices that name ``user``."""
    es.indices.refresh(index=f"{names.prefix}-*")
    return [
        hit["_id"]
        for hit in scan(es, index=f"{names.prefix}-*", query={"query": {"match_all": {}}})
        if user in json.dumps(hit["_source"])
    ]


def queued_job(app: MemqCelery, scope: Scope, marker: str) -> str:
    """A job accepted but not started: its record, and its state (the request) in Redis."""
    request = AddRequest(
        scope=scope, messages=[MessageIn.model_validate({"role": "user", "content": marker})]
    )
    now = datetime.now(UTC)
    state = JobState(job_id=f"job-{uuid.uuid4().hex}", request=request, received_at=now)
    app.runtime.states.enter(state, now)
    app.runtime.store.save_job(job_record(state, JobStatus.QUEUED, now))
    return state.job_id


def chat_event(user: str, marker: str) -> ChatEvent:
    return ChatEvent(
        platform="generic",
        event_id=uuid.uuid4().hex,
        conversation=f"generic:erase-{uuid.uuid4().hex[:6]}",
        user_id=user,
        run_id=None,
        role="user",
        name=None,
        content=f"still buffered: {marker}",
        at=datetime.now(UTC),
    )
