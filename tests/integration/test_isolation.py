"""Tenants against each other, on the real Elasticsearch and Redis (and a real worker where
jobs must run): identifiers that could name another scope, filters that must not lose a
condition, cursors bound to their tenant, addresses memq must not reach, erasure of every
history row, and what the unauthenticated endpoints tell."""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from pipeline.config import Settings
from pipeline.store.indices import IndexNames
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
