"""Request ids in the API (``api.request_ids``): every answer carries one, the caller's when
it is sane, refusals and mounted apps' answers included. The app is ``create_app``'s, in this
process, with no service reachable (tests/integration/test_request_ids.py follows the id
further, through a real stack)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from pipeline.config import Settings
from tests.processes import free_port

BODY_LIMIT = 10_000
GENERATED = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def client() -> Iterator[TestClient]:
    settings = Settings.model_validate(
        {
            "es": {"url": f"http://127.0.0.1:{free_port()}"},
            "redis": {"url": f"redis://127.0.0.1:{free_port()}/0"},
            "api": {"max_body_bytes": BODY_LIMIT},
        }
    )
    with TestClient(create_app(settings)) as http:
        yield http


def test_an_answer_carries_a_new_id_when_the_caller_sends_none(client: TestClient) -> None:
    first = client.get("/healthz").headers["X-Request-ID"]
    second = client.get("/healthz").headers["X-Request-ID"]

    assert GENERATED.fullmatch(first) and GENERATED.fullmatch(second)
    assert first != second


@pytest.mark.parametrize("sent", ["abc-123", "0f8fad5b-d9cb-469f-a165-70867728950e", "a" * 128])
def test_a_sane_id_of_the_caller_is_kept(client: TestClient, sent: str) -> None:
    assert client.get("/healthz", headers={"X-Request-ID": sent}).headers["X-Request-ID"] == sent


@pytest.mark.parametrize("sent", ["", "two words", "a" * 129, 'quote"d', "semi;colon", "é"])
def test_an_unusable_id_of_the_caller_is_replaced(client: TestClient, sent: str) -> None:
    answer = client.get("/healthz", headers={"X-Request-ID": sent.encode()})

    assert GENERATED.fullmatch(answer.headers["X-Request-ID"]), answer.headers


def test_refusals_and_mounted_apps_carry_the_id_too(client: TestClient) -> None:
    sent = {"X-Request-ID": "refused-1"}
    too_large = client.post("/v1/memories", content=b"x" * (BODY_LIMIT + 1), headers=sent)
    unknown = client.get("/v1/nowhere", headers=sent)
    # a tenant key is looked up in Elasticsearch, which this app cannot reach
    store_down = client.get("/v1/memories", headers={**sent, "Authorization": "Bearer mq_x"})
    mcp = client.post("/mcp", json={}, headers=sent)

    answers = (too_large, unknown, store_down, mcp)
    assert [r.status_code for r in answers] == [413, 404, 503, 401]
    for answer in answers:
        assert answer.headers.get_list("X-Request-ID") == ["refused-1"], answer.headers
