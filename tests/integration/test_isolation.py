"""Tenants against each other, on the real Elasticsearch and Redis (and a real worker where
jobs must run): identifiers that could name another scope, filters that must not lose a
condition, cursors bound to their tenant, addresses memq must not reach, erasure of every
history row, and what the unauthenticated endpoints tell."""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Iterator

import httpx
import pytest
from elasticsearch import Elasticsearch
from fastapi.testclient import TestClient

from api.app import create_app
from pipeline.config import Settings
from pipeline.store.indices import IndexNames
from tests.processes import WorkerProcess
from workers.app import MemqCelery
from workers.serving import CeleryIntake

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(settings: Settings, celery_app: MemqCelery, indices: IndexNames) -> Iterator[TestClient]:
    app = create_app(settings, CeleryIntake(celery_app))
    with TestClient(app) as test_client:
        yield test_client


def admin_headers(settings: Settings) -> dict[str, str]:
    admin = settings.api.admin_key
    assert admin is not None, "the tests need MEMQ_API_ADMIN_KEY (ops/test sets it)"
    return {"authorization": f"Bearer {admin.get_secret_value()}"}


def tenant_headers(client: TestClient, settings: Settings) -> dict[str, str]:
    created = client.post(
        "/v1/admin/keys",
        json={"tenant": f"iso-{uuid.uuid4().hex[:8]}"},
        headers=admin_headers(settings),
    )
    assert created.status_code == 201, created.text
    return {"authorization": f"Bearer {created.json()['key']}"}


@pytest.mark.parametrize("bad", ["x\x1fother", "x\x00", "x\u202eevil", "x\x7f"])
def test_ids_with_control_or_format_characters_are_422_on_every_surface(
    client: TestClient, settings: Settings, bad: str
) -> None:
    headers = tenant_headers(client, settings)
    body = {"user_id": bad, "infer": False, "messages": [{"role": "user", "content": "hello"}]}
    quoted = urllib.parse.quote(bad, safe="")
    answers = {
        "add": client.post("/v1/memories", json=body, headers=headers),
        "mem0 add": client.post("/v3/memories/add/", json=body, headers=headers),
        "list": client.get("/v1/memories", params={"user_id": bad}, headers=headers),
        "search": client.post(
            "/v1/memories/search", json={"query": "q", "agent_id": bad}, headers=headers
        ),
        "delete all": client.delete("/v1/memories", params={"run_id": bad}, headers=headers),
        "erase": client.delete(f"/v1/users/{quoted}", headers=headers),
        "mem0 erase": client.delete(f"/v2/entities/user/{quoted}/", headers=headers),
        "tenant": client.post(
            "/v1/admin/keys", json={"tenant": f"t{bad}"}, headers=admin_headers(settings)
        ),
    }
    statuses = {name: answer.status_code for name, answer in answers.items()}
    assert statuses == dict.fromkeys(answers, 422), statuses
    assert "control or format" in answers["add"].text


def remember(client: TestClient, headers: dict[str, str], text: str, **ids: str) -> None:
    """Store ``text`` verbatim in the scope ``ids`` and wait until it is findable."""
    body = {**ids, "infer": False, "messages": [{"role": "user", "content": text}]}
    added = client.post("/v1/memories", params={"wait": "true"}, json=body, headers=headers)
    assert added.status_code == 200 and added.json()["status"] == "succeeded", added.text


def listed_users(client: TestClient, headers: dict[str, str], filters: object) -> list[str]:
    """The user ids of the memories mem0's get_all lists under ``filters``."""
    listed = client.post("/v3/memories/", json={"filters": filters}, headers=headers)
    assert listed.status_code == 200, listed.text
    return sorted(item["user_id"] for item in listed.json()["results"])


def test_no_filter_condition_is_dropped(
    client: TestClient, settings: Settings, worker: WorkerProcess
) -> None:
    headers = tenant_headers(client, settings)
    remember(client, headers, "alice drinks tea", user_id="alice", agent_id="helper")
    remember(client, headers, "bob drinks coffee", user_id="bob", agent_id="helper")
    assert listed_users(client, headers, {"agent_id": "helper"}) == ["alice", "bob"]
    # a condition on a scope key that is not an equality is a condition, not a scope
    not_alice = {"agent_id": "helper", "user_id": {"ne": "alice"}}
    assert listed_users(client, headers, not_alice) == ["bob"]
    searched = client.post(
        "/v1/memories/search", json={"query": "drinks", "filters": not_alice}, headers=headers
    )
    assert searched.status_code == 200, searched.text
    assert [hit["user_id"] for hit in searched.json()["results"]] == ["bob"]
    # a NOT beside a top-level AND holds too
    beside = {"AND": [{"agent_id": "helper"}], "NOT": {"user_id": "alice"}}
    assert listed_users(client, headers, beside) == ["bob"]
    # two values for one id can match nothing: a 422 that says so, never the last one winning
    both = {"AND": [{"agent_id": "helper"}, {"user_id": "alice"}, {"user_id": "bob"}]}
    refused = client.post("/v3/memories/", json={"filters": both}, headers=headers)
    assert refused.status_code == 422 and "two different user_id" in refused.text, refused.text
    # mem0's delete_all keeps every condition of its filters too
    deleted = client.delete("/v1/memories/", params={"filters": repr(not_alice)}, headers=headers)
    assert deleted.status_code == 200 and deleted.json()["deleted"] == 1, deleted.text
    assert listed_users(client, headers, {"agent_id": "helper"}) == ["alice"]


def test_another_tenants_cursor_is_refused_and_leaves_its_listing_open(
    client: TestClient, settings: Settings, worker: WorkerProcess
) -> None:
    owner, intruder = tenant_headers(client, settings), tenant_headers(client, settings)
    for text in ("first thing", "second thing"):
        remember(client, owner, text, user_id="u1")
    first = client.get("/v1/memories", params={"user_id": "u1", "page_size": 1}, headers=owner)
    assert first.status_code == 200, first.text
    cursor = first.json()["next_cursor"]
    assert cursor
    stolen = client.get(
        "/v1/memories", params={"user_id": "u1", "page_size": 1, "cursor": cursor}, headers=intruder
    )
    assert stolen.status_code == 422 and "cursor" in stolen.text, stolen.text
    # the owner's point in time is still open: its listing goes on
    second = client.get(
        "/v1/memories", params={"user_id": "u1", "page_size": 1, "cursor": cursor}, headers=owner
    )
    assert second.status_code == 200, second.text
    assert second.json()["results"][0]["id"] != first.json()["results"][0]["id"]


def test_erasing_a_user_removes_the_delete_rows_of_a_scope_wide_delete(
    client: TestClient, settings: Settings, worker: WorkerProcess
) -> None:
    headers = tenant_headers(client, settings)
    marker = f"Wombat{uuid.uuid4().hex[:10]}"
    remember(client, headers, f"{marker} is my cat", user_id="u1", agent_id="ag1")
    [memory] = client.get("/v1/memories", params={"user_id": "u1"}, headers=headers).json()[
        "results"
    ]
    # deleting by the agent's scope writes the DELETE row, which keeps the text
    wiped = client.delete("/v1/memories", params={"agent_id": "ag1"}, headers=headers)
    assert wiped.status_code == 200 and wiped.json()["deleted"] == 1, wiped.text
    history = client.get(f"/v1/memories/{memory['id']}/history", headers=headers)
    assert marker in history.text, history.text
    erased = client.delete("/v1/users/u1", headers=headers)
    assert erased.status_code == 200, erased.text
    after = client.get(f"/v1/memories/{memory['id']}/history", headers=headers)
    assert marker not in after.text, after.text


def test_substring_filters_on_shared_term_dictionaries_are_bounded(
    client: TestClient, settings: Settings
) -> None:
    headers = tenant_headers(client, settings)

    def searched(filters: dict[str, object]) -> httpx.Response:
        body = {"query": "anything", "user_id": "u1", "filters": filters}
        return client.post("/v1/memories/search", json=body, headers=headers)

    fields = ("agent_id", "run_id", "actor_id", "job_id", "hash")
    four = {"OR": [{field: {"icontains": "abc"}} for field in fields[:4]]}
    assert searched(four).status_code == 200
    five = {"OR": [{field: {"icontains": "abc"}} for field in fields]}
    refused = searched(five)
    assert refused.status_code == 422 and "more than 4 contains/icontains" in refused.text
    short = searched({"agent_id": {"contains": "a"}})
    assert short.status_code == 422 and "at least 3 characters" in short.text
    assert searched({"text": {"contains": "a"}}).status_code == 200  # a phrase match: no walk


@pytest.fixture(scope="module")
def tight(settings: Settings, celery_app: MemqCelery, indices: IndexNames) -> Iterator[TestClient]:
    """An API with small limits: 5 writes and 5 reads per 5 s per tenant."""
    api = settings.api.model_copy(
        update={"rate_write_per_s": 1, "rate_read_per_s": 1, "rate_window_s": 5}
    )
    app = create_app(settings.model_copy(update={"api": api}), CeleryIntake(celery_app))
    with TestClient(app) as test_client:
        yield test_client


def test_a_batch_costs_its_items(tight: TestClient, settings: Settings) -> None:
    headers = tenant_headers(tight, settings)
    said = [{"role": "user", "content": "a fact"}]
    items = [{"user_id": f"u{i}", "infer": False, "messages": said} for i in range(12)]
    accepted = tight.post("/v1/batches", json={"items": items}, headers=headers)
    assert accepted.status_code == 202, accepted.text
    # 12 writes at 5 per 5 s: this window and the next two are spent
    after = tight.delete(f"/v1/memories/{uuid.uuid4()}", headers=headers)
    assert after.status_code == 429, after.text
    assert int(after.headers["retry-after"]) > 5


def test_reads_are_limited(tight: TestClient, settings: Settings) -> None:
    headers = tenant_headers(tight, settings)
    answers = [tight.get(f"/v1/memories/{uuid.uuid4()}", headers=headers) for _ in range(6)]
    assert [a.status_code for a in answers[:5]] == [404] * 5
    assert answers[5].status_code == 429, answers[5].text


def test_unknown_ids_do_not_each_force_a_refresh(
    client: TestClient, settings: Settings, es: Elasticsearch, indices: IndexNames
) -> None:
    headers = tenant_headers(client, settings)

    def refreshes() -> int:
        stats = es.indices.stats(index=indices.memories, metric="refresh")
        return int(stats["_all"]["primaries"]["refresh"]["external_total"])

    before = refreshes()
    for _ in range(20):
        assert client.get(f"/v1/memories/{uuid.uuid4()}", headers=headers).status_code == 404
    assert refreshes() - before <= 10
