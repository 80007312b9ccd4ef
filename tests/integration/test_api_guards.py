"""The API's guards, on the real Elasticsearch and Redis: per-tenant limits answered 429 with
Retry-After, mem0's page walk bounded, signature headers that are not ASCII or not a time
answered 401, and a 413 that an ordinary client (urllib, over a real server) gets to read."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from pipeline.config import Settings
from pipeline.store.indices import IndexNames
from pipeline.store.routing import source_routing
from workers.app import MemqCelery
from workers.serving import CeleryIntake

pytestmark = pytest.mark.integration

GENERIC = "generic-webhook-secret"


@pytest.fixture(scope="module")
def client(settings: Settings, celery_app: MemqCelery, indices: IndexNames) -> Iterator[TestClient]:
    api = settings.api.model_copy(
        update={
            # 5 requests per 5 s: the bursts below fit in a window even on a busy machine
            "rate_write_per_s": 1,
            "rate_search_per_s": 1,
            "rate_window_s": 5,
            "open_cursors_per_tenant": 2,
        }
    )
    chat = settings.chat.model_copy(update={"webhook_secret": SecretStr(GENERIC)})
    app = create_app(
        settings.model_copy(update={"api": api, "chat": chat}), CeleryIntake(celery_app)
    )
    with TestClient(app) as test_client:
        yield test_client


def tenant_headers(client: TestClient, tenant: str | None = None) -> dict[str, str]:
    """A new key's headers, for ``tenant`` (a new tenant when None)."""
    admin = client.app.state.settings.api.admin_key  # type: ignore[attr-defined]
    assert admin is not None, "the tests need MEMQ_API_ADMIN_KEY (ops/test sets it)"
    created = client.post(
        "/v1/admin/keys",
        json={"tenant": tenant or f"guard-{uuid.uuid4().hex[:8]}"},
        headers={"authorization": f"Bearer {admin.get_secret_value()}"},
    )
    assert created.status_code == 201, created.text
    return {"authorization": f"Bearer {created.json()['key']}"}


def assert_429(response: Any) -> None:
    assert response.status_code == 429, response.text
    assert response.json()["error"]["type"] == "rate_limited"
    assert 1 <= int(response.headers["retry-after"]) <= 300


def test_searches_over_the_tenant_rate_are_429(client: TestClient) -> None:
    headers, other = tenant_headers(client), tenant_headers(client)
    body = {"query": "bees", "user_id": "u1"}
    client.post("/v1/memories/search", json=body, headers=other)  # loads the models
    answers = [client.post("/v1/memories/search", json=body, headers=headers) for _ in range(6)]
    assert [a.status_code for a in answers[:5]] == [200] * 5
    assert_429(answers[5])
    assert client.post("/v1/memories/search", json=body, headers=other).status_code == 200
    time.sleep(int(answers[5].headers["retry-after"]) + 0.1)
    # after Retry-After the tenant is served again (a loaded machine may lag a second behind)
    deadline = time.monotonic() + 3.0
    while (
        answer := client.post("/v1/memories/search", json=body, headers=headers)
    ).status_code == 429:
        assert time.monotonic() < deadline, answer.headers
        time.sleep(0.2)
    assert answer.status_code == 200


def test_writes_over_the_tenant_rate_are_429(client: TestClient) -> None:
    headers = tenant_headers(client)
    answers = [
        client.delete("/v1/memories", params={"user_id": f"w{i}"}, headers=headers)
        for i in range(6)
    ]
    assert [a.status_code for a in answers[:5]] == [200] * 5
    assert_429(answers[5])


def test_a_tenant_cannot_hold_more_open_cursors_than_its_share(client: TestClient) -> None:
    headers = tenant_headers(client)
    user = f"cur-{uuid.uuid4().hex[:8]}"
    store = client.app.state.resources.services.store  # type: ignore[attr-defined]
    tenant = client.get("/v1/ping/", headers=headers).json()["org_id"]
    seed_memories(store, tenant, user, 3)
    params = {"user_id": user, "page_size": 1}
    cursors = []
    for _ in range(2):
        page = client.get("/v1/memories", params=params, headers=headers)
        assert page.status_code == 200, page.text
        cursors.append(page.json()["next_cursor"])
    assert_429(client.get("/v1/memories", params=params, headers=headers))
    cursor = cursors[0]
    while cursor:  # paging one listing to its end gives its cursor back
        page = client.get("/v1/memories", params={**params, "cursor": cursor}, headers=headers)
        cursor = page.json()["next_cursor"]
    assert client.get("/v1/memories", params=params, headers=headers).status_code == 200


def seed_memories(store: Any, tenant: str, user: str, count: int) -> None:
    body = [
        {
            "tenant": tenant,
            "user_id": user,
            "text": f"seeded {i}",
            "created_at": f"2026-01-0{i + 1}",
        }
        for i in range(count)
    ]
    for i, doc in enumerate(body):
        store.client.index(
            index=store.names.memories, id=f"{user}-{i}", document=doc, routing=source_routing(doc)
        )
    store.make_visible()


def test_mem0_page_walk_is_bounded(client: TestClient) -> None:
    headers = tenant_headers(client)
    body = {"filters": {"user_id": "walker"}}
    far = client.post("/v3/memories/", params={"page": 100_000}, json=body, headers=headers)
    assert far.status_code == 422, far.text
    assert far.json()["error"]["field"] == "page"
    near = client.post("/v3/memories/", params={"page": 2}, json=body, headers=headers)
    assert near.status_code == 200


def generic_headers(ts: str, signature: str) -> dict[str, str]:
    return {"x-memq-timestamp": ts, "x-memq-signature": signature}


def signed(body: bytes, ts: str) -> str:
    return (
        "sha256=" + hmac.new(GENERIC.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    )


@pytest.mark.parametrize(
    ("ts", "signature"),
    [
        ("9" * 400, None),  # a number too large for a float
        ("\u0661\u0667" + "\u0660" * 8, None),  # digits of another script
        ("-1", None),
        ("1e9", None),
        (None, "sha256=\u00e9\u00e9"),  # a signature that is not ASCII
        (None, "sha256=" + "f" * 5000),
    ],
)
def test_odd_signature_headers_are_401_not_500(
    client: TestClient, ts: str | None, signature: str | None
) -> None:
    body = json.dumps({"event_id": "e", "conversation_id": "c", "user_id": "u", "content": "x"})
    stamp = ts or str(int(time.time()))
    headers = generic_headers(stamp, signature or signed(body.encode(), stamp))
    raw = {k: v.encode("utf-8") for k, v in headers.items()}
    answer = client.post(
        "/v1/webhooks/generic",
        content=body,
        headers=[*raw.items(), (b"content-type", b"application/json")],
    )
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["type"] == "bad_signature"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def served_api(
    test_env: dict[str, str], indices: IndexNames, tmp_path_factory: Any
) -> Iterator[str]:
    """A real ``memq api`` process (uvicorn) with a small body limit."""
    port = free_port()
    env = {**test_env, "MEMQ_API_PORT": str(port), "MEMQ_API_MAX_BODY_BYTES": "10000"}
    log_path: Path = tmp_path_factory.mktemp("api") / "api.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "memq.cli", "api"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"the API did not start: {log_path.read_text()[-2000:]}")
                time.sleep(0.3)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize("size", [200_000, 3_000_000, 30_000_000])
def test_urllib_reads_the_413_of_an_oversized_body(served_api: str, size: int) -> None:
    request = urllib.request.Request(
        f"{served_api}/v1/memories",
        data=b"x" * size,
        headers={"content-type": "application/json", "authorization": "Bearer nope"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 413
    assert json.loads(caught.value.read())["error"]["type"] == "too_large"
