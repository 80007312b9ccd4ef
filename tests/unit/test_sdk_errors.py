"""The SDK's error translation and request shapes, over ``httpx.MockTransport``: a real httpx
transport whose handler plays the server (or raises what a failing network raises). The
clients here send each call once (``max_retries=0``): what a failure becomes, not how often it
is tried, which is test_sdk_retries.py's subject."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

import memq
from memq import (
    AsyncClient,
    AuthenticationError,
    Client,
    MemqAPIError,
    MemqTimeoutError,
    NotFoundError,
    RateLimitError,
    UnavailableError,
    ValidationError,
)
from pipeline.domain.jobs import JobStatus

Handler = Callable[[httpx.Request], httpx.Response]
BASE_URL = "http://memq.test"


def job_json(status: str, job_id: str = "j1") -> dict[str, Any]:
    """A job as the API's GET /v1/jobs/{id} answers it."""
    now = "2026-11-30T12:00:00+00:00"
    return {
        "job_id": job_id,
        "status": status,
        "phase": None,
        "batch_id": None,
        "attempts": 0,
        "counts": {},
        "timings_ms": {},
        "reason": None,
        "errors": [],
        "results": [],
        "created_at": now,
        "updated_at": now,
        "finished_at": None,
    }


def memory_json(memory_id: str) -> dict[str, Any]:
    return {"id": memory_id, "memory": f"text of {memory_id}"}


def accepted_json(job_id: str = "j1") -> dict[str, Any]:
    """The API's answer to an add that was queued."""
    url = f"/v1/jobs/{job_id}"
    return {"job_id": job_id, "status": "queued", "status_url": url, "created": True}


def envelope(kind: str, message: str, field: str | None = None) -> dict[str, Any]:
    """memq's error body."""
    return {"error": {"type": kind, "message": message, "field": field}, "detail": message}


def answering(status: int, body: Any = None, text: str | None = None) -> Handler:
    def handler(_: httpx.Request) -> httpx.Response:
        if text is not None:
            return httpx.Response(status, text=text)
        return httpx.Response(status, json=body)

    return handler


def raising(exc: Exception) -> Handler:
    def handler(_: httpx.Request) -> httpx.Response:
        raise exc

    return handler


def sync_client(handler: Handler) -> Client:
    return Client(BASE_URL, "mq_test", transport=httpx.MockTransport(handler), max_retries=0)


def call_sync(handler: Handler) -> MemqAPIError:
    with sync_client(handler) as client, pytest.raises(MemqAPIError) as raised:
        client.job("j1")
    return raised.value


def call_async(handler: Handler) -> MemqAPIError:
    async def scenario() -> None:
        transport = httpx.MockTransport(handler)
        async with AsyncClient(BASE_URL, "mq_test", transport=transport, max_retries=0) as sdk:
            await sdk.job("j1")

    with pytest.raises(MemqAPIError) as raised:
        asyncio.run(scenario())
    return raised.value


CALLERS = [pytest.param(call_sync, id="sync"), pytest.param(call_async, id="async")]


@pytest.mark.parametrize("call", CALLERS)
@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (400, "bad_request", ValidationError),
        (401, "unauthorized", AuthenticationError),
        (403, "forbidden", AuthenticationError),
        (404, "not_found", NotFoundError),
        (413, "too_large", ValidationError),
        (422, "invalid_input", ValidationError),
        (429, "rate_limited", RateLimitError),
        (503, "unavailable", UnavailableError),
        (500, "internal", MemqAPIError),
        (409, "conflict", MemqAPIError),
    ],
)
def test_error_bodies_become_the_matching_error(
    call: Callable[[Handler], MemqAPIError], status: int, kind: str, expected: type[MemqAPIError]
) -> None:
    error = call(answering(status, envelope(kind, "it went wrong", "user_id")))

    assert type(error) is expected
    assert (error.status, error.type, error.message, error.field) == (
        status,
        kind,
        "it went wrong",
        "user_id",
    )
    assert str(error) == f"{status} {kind}: it went wrong (field user_id)"
    assert error.retry_after_s is None


@pytest.mark.parametrize("call", CALLERS)
@pytest.mark.parametrize(
    ("status", "retry_after", "expected"),
    [
        (429, "7", 7.0),
        (503, "120", 120.0),
        (503, "Fri, 31 Dec 1999 23:59:59 GMT", 0.0),  # a date already past: now
        (429, "whenever", None),
    ],
)
def test_a_refusal_carries_the_servers_retry_after(
    call: Callable[[Handler], MemqAPIError], status: int, retry_after: str, expected: float | None
) -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        body = envelope("rate_limited" if status == 429 else "unavailable", "later")
        return httpx.Response(status, json=body, headers={"Retry-After": retry_after})

    error = call(handler)

    assert type(error) is (RateLimitError if status == 429 else UnavailableError)
    assert error.retry_after_s == expected


@pytest.mark.parametrize("call", CALLERS)
def test_a_body_without_the_envelope_keeps_its_text(
    call: Callable[[Handler], MemqAPIError],
) -> None:
    error = call(answering(502, text="<html>bad gateway</html>"))

    assert isinstance(error, UnavailableError)
    assert (error.status, error.type, error.message, error.field) == (
        502,
        "http",
        "<html>bad gateway</html>",
        None,
    )


@pytest.mark.parametrize("call", CALLERS)
@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (httpx.ConnectError("connection refused"), "transport"),
        (httpx.RemoteProtocolError("server hung up"), "transport"),
        (httpx.ReadTimeout("read timed out"), "timeout"),
        (httpx.ConnectTimeout("connect timed out"), "timeout"),
    ],
)
def test_transport_failures_are_unavailable(
    call: Callable[[Handler], MemqAPIError], exc: Exception, kind: str
) -> None:
    error = call(raising(exc))

    assert type(error) is UnavailableError
    assert (error.status, error.type) == (None, kind)
    assert error.__cause__ is exc


@pytest.mark.parametrize("call", CALLERS)
def test_other_httpx_errors_never_leak(call: Callable[[Handler], MemqAPIError]) -> None:
    exc = httpx.TooManyRedirects("redirect loop")
    error = call(raising(exc))

    assert type(error) is MemqAPIError
    assert (error.status, error.type) == (None, "client")
    assert error.__cause__ is exc


@pytest.mark.parametrize("call", CALLERS)
def test_a_success_that_is_not_json_is_an_invalid_response(
    call: Callable[[Handler], MemqAPIError],
) -> None:
    error = call(answering(200, text="not json"))

    assert type(error) is MemqAPIError
    assert (error.status, error.type) == (200, "invalid_response")


def test_readyz_not_ready_is_unavailable_with_the_reason() -> None:
    body = {"ready": False, "elasticsearch": "down: refused", "redis": "ok"}
    with sync_client(answering(503, body)) as client, pytest.raises(UnavailableError) as raised:
        client.readyz()
    assert "down: refused" in raised.value.message


def test_the_errors_form_one_tree_exported_from_memq() -> None:
    for cls in (
        AuthenticationError,
        NotFoundError,
        ValidationError,
        RateLimitError,
        UnavailableError,
    ):
        assert issubclass(cls, MemqAPIError)
    assert issubclass(MemqTimeoutError, MemqAPIError)
    assert memq.Client is Client
    with pytest.raises(AttributeError):
        _ = memq.NoSuchThing


# -- wait_for --------------------------------------------------------------------------------


def job_answering(*statuses: str) -> tuple[Handler, list[str]]:
    """A job endpoint reporting ``statuses`` in turn (the last one repeats); returns the
    handler and the list of paths it was asked for."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        status = statuses[min(len(seen), len(statuses)) - 1]
        return httpx.Response(200, json=job_json(status))

    return handler, seen


def test_wait_for_polls_until_the_job_ends_and_returns_a_failed_job() -> None:
    handler, seen = job_answering(JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.FAILED)
    with sync_client(handler) as client:
        job = client.wait_for({"job_id": "j1"}, timeout_s=5.0, poll_s=0.01)

    assert job["status"] == JobStatus.FAILED
    assert seen == ["/v1/jobs/j1"] * 3


def test_wait_for_times_out_with_the_last_job() -> None:
    handler, _ = job_answering(JobStatus.RUNNING)
    with sync_client(handler) as client, pytest.raises(MemqTimeoutError) as raised:
        client.wait_for("j1", timeout_s=0.0)

    assert raised.value.job is not None
    assert (raised.value.job.job_id, raised.value.job.status) == ("j1", "running")
    assert "still running" in raised.value.message


def test_async_wait_for_times_out() -> None:
    handler, _ = job_answering(JobStatus.QUEUED)

    async def scenario() -> None:
        async with AsyncClient(BASE_URL, "k", transport=httpx.MockTransport(handler)) as sdk:
            await sdk.wait_for("j1", timeout_s=0.05, poll_s=0.01)

    with pytest.raises(MemqTimeoutError):
        asyncio.run(scenario())


# -- request shapes --------------------------------------------------------------------------


def recording(answer: Any, status: int = 200) -> tuple[Handler, list[httpx.Request]]:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(status, json=answer)

    return handler, requests


def test_add_sends_the_key_the_idempotency_key_and_iso_datetimes() -> None:
    handler, requests = recording(accepted_json(), status=202)
    when = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
    with sync_client(handler) as client:
        client.add("hi", user_id="u1", timestamp=when, idempotency_key="idem-1", infer=False)

    [request] = requests
    assert (request.method, request.url.path, request.url.query) == ("POST", "/v1/memories", b"")
    assert request.headers["authorization"] == "Bearer mq_test"
    assert request.headers["idempotency-key"] == "idem-1"
    assert json.loads(request.content) == {
        "messages": "hi",
        "user_id": "u1",
        "infer": False,
        "timestamp": "2024-05-01T12:30:00+00:00",
    }


def test_add_with_wait_asks_the_server_to_wait_within_the_http_timeout() -> None:
    handler, requests = recording(job_json("succeeded"))
    transport = httpx.MockTransport(handler)
    with Client(BASE_URL, "k", timeout_s=10.0, transport=transport) as client:
        job = client.add("hi", user_id="u1", wait=True)

    assert job["status"] == JobStatus.SUCCEEDED
    assert dict(requests[0].url.params) == {"wait": "true", "wait_s": "5.0"}


def test_get_all_follows_next_cursor_and_sends_filters_as_json() -> None:
    pages = {
        None: {"results": [memory_json("a"), memory_json("b")], "next_cursor": "c1"},
        "c1": {"results": [memory_json("c")], "next_cursor": None},
    }
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json=pages[request.url.params.get("cursor")])

    with sync_client(handler) as client:
        ids = [m["id"] for m in client.get_all(user_id="u1", filters={"n": 1}, page_size=2)]

    assert ids == ["a", "b", "c"]
    assert [dict(r.url.params) for r in requests] == [
        {"user_id": "u1", "page_size": "2", "filters": '{"n":1}'},
        {"user_id": "u1", "page_size": "2", "cursor": "c1", "filters": '{"n":1}'},
    ]


def test_ids_are_escaped_in_paths() -> None:
    handler, requests = recording(memory_json("x"))
    with sync_client(handler) as client:
        client.get("a/../b")

    assert requests[0].url.raw_path == b"/v1/memories/a%2F..%2Fb"


# -- configuration from the environment ------------------------------------------------------


def test_client_reads_its_url_key_and_timeout_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMQ_CLIENT_URL", "http://memq.env")
    monkeypatch.setenv("MEMQ_CLIENT_API_KEY", "mq_from_env")
    monkeypatch.setenv("MEMQ_CLIENT_TIMEOUT_S", "7.5")
    handler, requests = recording({"status": "ok"})

    with Client(transport=httpx.MockTransport(handler)) as client:
        assert client.healthz().status == "ok"
        assert client.base_url == "http://memq.env"

    assert str(requests[0].url) == "http://memq.env/healthz"
    assert requests[0].headers["authorization"] == "Bearer mq_from_env"
    assert requests[0].extensions["timeout"]["read"] == 7.5


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_CLIENT_API_KEY", "mq_from_env")
    handler, requests = recording({"status": "ok"})

    with Client(BASE_URL, "mq_arg", transport=httpx.MockTransport(handler)) as client:
        client.healthz()

    assert requests[0].headers["authorization"] == "Bearer mq_arg"


@pytest.mark.parametrize("client_class", [Client, AsyncClient])
def test_no_key_anywhere_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, client_class: type[Client] | type[AsyncClient]
) -> None:
    monkeypatch.delenv("MEMQ_CLIENT_API_KEY", raising=False)

    with pytest.raises(MemqAPIError) as raised:
        client_class(BASE_URL)

    assert raised.value.type == "configuration"
    assert "MEMQ_CLIENT_API_KEY" in raised.value.message


def test_a_bad_timeout_in_the_environment_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_CLIENT_TIMEOUT_S", "soon")

    with pytest.raises(MemqAPIError, match="MEMQ_CLIENT_TIMEOUT_S"):
        Client(BASE_URL, "k")


def test_an_answer_of_the_wrong_shape_is_an_invalid_response() -> None:
    client = sync_client(answering(200, {"job_id": "j1"}))
    with client, pytest.raises(MemqAPIError) as raised:
        client.job("j1")

    assert raised.value.type == "invalid_response"
    assert "status" in raised.value.message


def test_answers_keep_fields_a_newer_server_adds() -> None:
    body = {**memory_json("a"), "importance": 0.9}
    with sync_client(answering(200, body)) as client:
        memory = client.get("a")

    assert memory.model_extra == {"importance": 0.9}
    assert memory["importance"] == 0.9 and memory.get("nope", 1) == 1
    with pytest.raises(KeyError):
        memory["nope"]


def test_the_pager_walks_pages_lazily() -> None:
    pages = {
        None: {"results": [memory_json("a")], "next_cursor": "c1"},
        "c1": {"results": [memory_json("b")], "next_cursor": None},
    }
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json=pages[request.url.params.get("cursor")])

    with sync_client(handler) as client:
        pager = client.get_all(user_id="u1")
        assert requests == []  # nothing fetched until iterated
        first = next(iter(pager.pages()))
        assert [m.id for m in first.results] == ["a"] and first.next_cursor == "c1"
        assert [m.id for m in pager] == ["a", "b"]


def hit_json(memory_id: str) -> dict[str, Any]:
    return {**memory_json(memory_id), "score": 0.5}


def shards_json(failed: int) -> dict[str, Any]:
    return {"total": 3, "successful": 3 - failed, "failed": failed, "timed_out": False}


def test_a_search_answer_is_a_list_that_says_whether_it_is_partial() -> None:
    body = {"results": [hit_json("a")], "partial": True, "shards": shards_json(1)}
    with sync_client(answering(200, body)) as client:
        hits = client.search("chess", user_id="alice")

    assert [hit.id for hit in hits] == ["a"] and hits[0].score == 0.5
    assert hits.partial is True
    assert hits.shards is not None and (hits.shards.failed, hits.shards.successful) == (1, 2)


def test_an_answer_from_an_older_server_is_whole_without_counts() -> None:
    with sync_client(answering(200, {"results": [hit_json("a")]})) as client:
        hits = client.search("chess", user_id="alice")

    assert hits.partial is False and hits.shards is None and len(hits) == 1


def test_each_query_of_a_batch_search_is_flagged_from_its_own_counts() -> None:
    body = {
        "results": [[hit_json("a")], [hit_json("b")]],
        "partial": True,
        "shards": [shards_json(0), shards_json(1)],
    }

    async def scenario() -> list[memq.SearchHits]:
        transport = httpx.MockTransport(answering(200, body))
        async with AsyncClient(BASE_URL, "mq_test", transport=transport) as sdk:
            return await sdk.search_many([{"query": "a"}, {"query": "b"}])

    whole, partial = asyncio.run(scenario())

    assert [hit.id for hit in whole] == ["a"] and whole.partial is False
    assert [hit.id for hit in partial] == ["b"] and partial.partial is True


def test_shard_counts_that_do_not_match_the_queries_are_an_invalid_response() -> None:
    body = {"results": [[], []], "partial": False, "shards": [shards_json(0)]}
    with sync_client(answering(200, body)) as client, pytest.raises(MemqAPIError) as raised:
        client.search_many([{"query": "a"}, {"query": "b"}])

    assert raised.value.type == "invalid_response"
