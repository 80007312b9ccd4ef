"""Chat-platform webhooks through the real API app (in process, over ASGI), the real Redis and
a real worker: signatures, retries, the Slack handshake, and debounce grouping."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from pipeline.config import Settings
from pipeline.domain.jobs import JobStatus
from pipeline.store.elastic import ElasticStore
from tests.processes import WorkerProcess
from workers.app import MemqCelery
from workers.serving import CeleryIntake

pytestmark = pytest.mark.integration

SLACK = "slack-signing-secret"
TELEGRAM = "telegram-secret-token"
GENERIC = "generic-webhook-secret"


@pytest.fixture(scope="module")
def client(
    settings: Settings, celery_app: MemqCelery, worker: WorkerProcess
) -> Iterator[TestClient]:
    chat = settings.chat.model_copy(
        update={
            "slack_signing_secret": SecretStr(SLACK),
            "telegram_secret_token": SecretStr(TELEGRAM),
            "webhook_secret": SecretStr(GENERIC),
        }
    )
    app = create_app(settings.model_copy(update={"chat": chat}), CeleryIntake(celery_app))
    with TestClient(app) as test_client:
        yield test_client


def slack_post(
    client: TestClient, payload: dict[str, Any], secret: str = SLACK, age_s: int = 0
) -> Any:
    body = json.dumps(payload).encode()
    ts = str(int(time.time()) - age_s)
    signature = (
        "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    )
    return client.post(
        "/v1/webhooks/slack",
        content=body,
        headers={
            "content-type": "application/json",
            "x-slack-request-timestamp": ts,
            "x-slack-signature": signature,
        },
    )


def slack_message(
    channel: str, text: str, ts: float, event_id: str | None = None
) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T1",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10]}",
        "event": {
            "type": "message",
            "user": "U42",
            "text": text,
            "channel": channel,
            "ts": f"{ts:.6f}",
        },
    }


def jobs_of(
    store: ElasticStore, user_id: str, timeout_s: float = 30.0, want: int = 1
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    hits: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        store.client.indices.refresh(index=store.names.jobs)
        hits = store.client.search(
            index=store.names.jobs,
            size=50,
            query={
                "bool": {
                    "filter": [
                        {"term": {"status": JobStatus.SUCCEEDED}},
                        {"term": {"session_key": f"default\x1f{user_id}\x1f\x1f"}},
                    ]
                }
            },
        )["hits"]["hits"]
        if len(hits) >= want:
            return [h["_source"] for h in hits]
        time.sleep(0.3)
    return [h["_source"] for h in hits]


def test_slack_url_verification_is_answered(client: TestClient) -> None:
    response = slack_post(
        client, {"type": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY"}
    )
    assert response.status_code == 200 and response.json() == {
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY"
    }


def test_slack_rejects_bad_and_stale_signatures(client: TestClient) -> None:
    assert (
        slack_post(client, slack_message("C1", "hi", time.time()), secret="wrong").status_code
        == 401
    )
    stale = slack_post(client, slack_message("C1", "hi", time.time()), age_s=3600)
    assert stale.status_code == 401 and "window" in stale.json()["error"]["message"]
    unsigned = client.post(
        "/v1/webhooks/slack", json={"type": "url_verification", "challenge": "x"}
    )
    assert unsigned.status_code == 401


def test_a_burst_becomes_one_job_and_retries_are_ignored(
    client: TestClient, celery_app: MemqCelery
) -> None:
    channel = f"C{uuid.uuid4().hex[:8]}"
    now = time.time()
    first = slack_message(channel, "I am planning a trip to Kyoto", now, event_id=f"Ev{channel}1")
    assert slack_post(client, first).json() == {"ok": True, "accepted": True}
    assert slack_post(client, first).json() == {"ok": True, "accepted": False}  # Slack's retry
    slack_post(client, slack_message(channel, "in April, with my sister", now + 1))
    slack_post(client, slack_message(channel, "we love temples", now + 2))
    jobs = jobs_of(celery_app.runtime.store, f"slack:T1:{channel}")
    assert len(jobs) == 1
    messages = jobs[0]["request"]["messages"]
    assert [m["content"] for m in messages] == [
        "I am planning a trip to Kyoto",
        "in April, with my sister",
        "we love temples",
    ]


def test_telegram_needs_its_secret_token(client: TestClient, celery_app: MemqCelery) -> None:
    chat_id = int(uuid.uuid4().int % 10**9)
    update = {
        "update_id": chat_id,
        "message": {
            "message_id": 1,
            "date": int(time.time()),
            "text": "hello bot",
            "chat": {"id": chat_id, "type": "private"},
            "from": {"id": 7, "is_bot": False, "username": "ana"},
        },
    }
    bad = client.post(
        "/v1/webhooks/telegram", json=update, headers={"x-telegram-bot-api-secret-token": "nope"}
    )
    assert bad.status_code == 401
    good = client.post(
        "/v1/webhooks/telegram", json=update, headers={"x-telegram-bot-api-secret-token": TELEGRAM}
    )
    assert good.json() == {"ok": True, "accepted": True}
    again = client.post(
        "/v1/webhooks/telegram", json=update, headers={"x-telegram-bot-api-secret-token": TELEGRAM}
    )
    assert again.json() == {"ok": True, "accepted": False}
    jobs = jobs_of(celery_app.runtime.store, f"telegram:{chat_id}")
    assert [m["name"] for m in jobs[0]["request"]["messages"]] == ["ana"]


def test_generic_webhook_is_hmac_signed(client: TestClient) -> None:
    body = json.dumps(
        {
            "event_id": uuid.uuid4().hex,
            "conversation_id": "c1",
            "user_id": "u1",
            "content": "remember that I like tea",
        }
    ).encode()
    ts = str(int(time.time()))
    good = (
        "sha256=" + hmac.new(GENERIC.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    )
    headers = {"content-type": "application/json", "x-memq-timestamp": ts}
    assert client.post(
        "/v1/webhooks/generic", content=body, headers={**headers, "x-memq-signature": good}
    ).json()["accepted"]
    bad = client.post(
        "/v1/webhooks/generic", content=body, headers={**headers, "x-memq-signature": "sha256=00"}
    )
    assert bad.status_code == 401
    missing = json.dumps({"event_id": "e"}).encode()
    signed = (
        "sha256="
        + hmac.new(GENERIC.encode(), f"{ts}.".encode() + missing, hashlib.sha256).hexdigest()
    )
    response = client.post(
        "/v1/webhooks/generic", content=missing, headers={**headers, "x-memq-signature": signed}
    )
    assert response.status_code == 422 and response.json()["error"]["field"] == "conversation_id"


def test_a_platform_without_a_secret_is_off(settings: Settings, celery_app: MemqCelery) -> None:
    with TestClient(create_app(settings, CeleryIntake(celery_app))) as plain:
        assert plain.post("/v1/webhooks/slack", json={}).status_code == 404


def test_a_bad_event_is_refused_on_arrival_and_its_burst_is_kept(
    client: TestClient, celery_app: MemqCelery
) -> None:
    """An event that could not become part of a job is a 4xx to the platform at once; before,
    it was accepted and then sank its whole burst at the flush."""
    channel = f"C{uuid.uuid4().hex[:8]}"
    now = time.time()
    assert slack_post(client, slack_message(channel, "I adopted a cat", now)).status_code == 200
    bad_name = slack_message(channel, "her name is Miso", now + 1)
    bad_name["event"]["user"] = "two words"  # not an identifier: no message can carry it
    refused = slack_post(client, bad_name)
    assert refused.status_code == 422, refused.text
    bad_time = slack_message(channel, "she is two", now + 2)
    bad_time["event"]["ts"] = "not-a-time"
    assert slack_post(client, bad_time).status_code == 422
    assert slack_post(client, slack_message(channel, "she likes boxes", now + 3)).status_code == 200
    jobs = jobs_of(celery_app.runtime.store, f"slack:T1:{channel}")
    assert len(jobs) == 1
    assert [m["content"] for m in jobs[0]["request"]["messages"]] == [
        "I adopted a cat",
        "she likes boxes",
    ]
    buffered = celery_app.runtime.redis.llen(
        f"{celery_app.runtime.chat_buffer.prefix}:slack:T1:{channel}::events"
    )
    assert buffered == 0  # dropped once the job existed


def generic_post(client: TestClient, event: dict[str, Any], signature: str | None = None) -> Any:
    """POST ``event`` (as ASCII JSON: a lone surrogate goes as its escape) to the generic
    webhook, signed with ``GENERIC`` unless another ``signature`` is given."""
    body = json.dumps(event).encode()
    ts = str(int(time.time()))
    mac = hmac.new(GENERIC.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    headers = {
        "content-type": "application/json",
        "x-memq-timestamp": ts,
        "x-memq-signature": signature or f"sha256={mac}",
    }
    return client.post("/v1/webhooks/generic", content=body, headers=headers)


def test_a_chat_message_that_is_not_unicode_is_refused(client: TestClient) -> None:
    """A lone surrogate (the JSON escape ``\\ud800``) is a 422 after the signature checks out,
    never a 500 nor a job that fails later."""
    event = {
        "event_id": uuid.uuid4().hex,
        "conversation_id": "c-surrogate",
        "user_id": "u1",
        "content": "caf\ud800",
    }
    response = generic_post(client, event)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "content"
    assert "surrogate" in response.json()["error"]["message"]
    assert generic_post(client, event, signature="sha256=0").status_code == 401
