"""The SDK's retries: which failures a call is sent again after (``Repeat``), how long it
waits (``RetryPolicy``, ``Backoff``, ``Retry-After``), and both clients' loops over
``httpx.MockTransport``, a real httpx transport whose handler plays a server that refuses,
fails or drops the connection a given number of times before it answers. The loops run with
waits of a few milliseconds (``FAST``); the policy's own waits are checked as numbers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from memq import AsyncClient, Backoff, Client, MemqAPIError, RateLimitError, UnavailableError
from memq.client import Repeat, RetryPolicy, parse_retry_after, worth_repeating

BASE_URL = "http://memq.test"
FAST = Backoff(first_s=0.001, max_s=0.002)
KINDS = ["sync", "async"]
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

Step = httpx.Response | Exception


class Server:
    """Answers the tries in turn with ``steps`` (the last one again once they run out), and
    keeps every request it was sent. An answer is sent as a copy: a client takes over the
    stream of the response object it is handed, and a step may be shared between tests."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps[min(len(self.requests), len(self.steps)) - 1]
        if isinstance(step, Exception):
            raise step
        return httpx.Response(step.status_code, headers=step.headers, content=step.content)


def refused(retry_after: str | None = "0") -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"error": {"type": "rate_limited", "message": "over 2 search requests in 1 s"}}
    return httpx.Response(429, json=body, headers=headers)


def unavailable(retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"error": {"type": "unavailable", "message": "Elasticsearch is unreachable"}}
    return httpx.Response(503, json=body, headers=headers)


def ok(body: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


SEARCH_ANSWER = {"results": [{"id": "m1", "memory": "keeps bees", "score": 0.9}]}
MEMORY = {"id": "m1", "memory": "keeps bees"}
ACCEPTED = {"job_id": "j1", "status": "queued", "status_url": "/v1/jobs/j1", "created": True}
KEY = {"id": "k1", "tenant": "t1", "key": "mq_new"}
JOB = {
    "job_id": "j1",
    "status": "queued",
    "created_at": "2026-03-01T12:00:00+00:00",
    "updated_at": "2026-03-01T12:00:00+00:00",
}


def call(kind: str, server: Server, method: str, *args: Any, **kwargs: Any) -> Any:
    """``method(*args, **kwargs)`` on a ``kind`` client over ``server``; client options
    (``max_retries``, ``backoff``) are taken out of ``kwargs``, ``backoff`` is ``FAST``."""
    options = {
        "max_retries": kwargs.pop("max_retries", None),
        "backoff": kwargs.pop("backoff", FAST),
    }
    transport = httpx.MockTransport(server)
    if kind == "sync":
        with Client(BASE_URL, "mq_test", transport=transport, **options) as client:
            return getattr(client, method)(*args, **kwargs)

    async def scenario() -> Any:
        async with AsyncClient(BASE_URL, "mq_test", transport=transport, **options) as client:
            return await getattr(client, method)(*args, **kwargs)

    return asyncio.run(scenario())


# -- the policy, as numbers ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("5", 5.0),
        (" 12 ", 12.0),
        ("0", 0.0),
        ("1.5", 1.5),
        (format_datetime(NOW + timedelta(seconds=30), usegmt=True), 30.0),
        ("Sun, 01 Mar 2026 11:00:00 GMT", 0.0),  # past: come back now
        ("Sun, 01 Mar 2026 12:00:10 -0000", 10.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("-3", None),
        ("inf", None),
    ],
)
def test_retry_after_reads_delta_seconds_and_http_dates(
    header: str | None, seconds: float | None
) -> None:
    assert parse_retry_after(header, now=NOW) == seconds


def test_backoff_doubles_from_its_first_wait_up_to_its_cap_with_jitter() -> None:
    backoff = Backoff(first_s=0.5, max_s=3.0)

    assert [backoff.wait_s(n, jitter=1.0) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert [backoff.wait_s(n, jitter=0.0) for n in range(3)] == [0.25, 0.5, 1.0]
    assert backoff.wait_s(10_000, jitter=1.0) == 3.0


def test_the_policy_waits_as_the_server_says_then_backs_off_then_stops() -> None:
    policy = RetryPolicy(max_retries=2, backoff=Backoff(first_s=0.5, retry_after_max_s=60.0))

    def delay(outcome: Step, retries_done: int) -> float | None:
        return policy.delay_s(outcome, Repeat.IDEMPOTENT, retries_done, now=NOW, jitter=1.0)

    assert delay(refused("3"), 0) == 3.0
    assert delay(unavailable("Sun, 01 Mar 2026 12:00:20 GMT"), 1) == 20.0
    assert delay(unavailable(), 0) == 0.5
    assert delay(refused(None), 1) == 1.0
    assert delay(httpx.ConnectError("refused"), 1) == 1.0
    assert delay(refused("3"), 2) is None  # retries spent
    assert delay(refused("61"), 0) is None  # beyond the cap: the caller decides
    assert delay(ok(MEMORY), 0) is None
    assert RetryPolicy(max_retries=0).delay_s(refused("0"), Repeat.IDEMPOTENT, 0) is None


ANSWER_LOST = [
    httpx.ReadTimeout("read timed out"),
    httpx.WriteTimeout("write timed out"),
    httpx.ReadError("connection reset"),
    httpx.RemoteProtocolError("server disconnected without a response"),
]
NOT_SENT = [
    httpx.ConnectError("connection refused"),
    httpx.ConnectTimeout("connect timed out"),
    httpx.PoolTimeout("no free connection"),
]


@pytest.mark.parametrize(
    ("outcome", "repeated"),
    [
        (refused(), {Repeat.IDEMPOTENT, Repeat.IF_REFUSED}),
        (unavailable(), {Repeat.IDEMPOTENT}),
        (httpx.Response(502), {Repeat.IDEMPOTENT}),
        (httpx.Response(504), {Repeat.IDEMPOTENT}),
        *[(exc, {Repeat.IDEMPOTENT, Repeat.IF_REFUSED}) for exc in NOT_SENT],
        *[(exc, {Repeat.IDEMPOTENT}) for exc in ANSWER_LOST],
        (httpx.Response(500), set()),
        (httpx.Response(404), set()),
        (httpx.Response(200), set()),
        (httpx.UnsupportedProtocol("ftp://"), set()),
        (httpx.TooManyRedirects("loop"), set()),
    ],
)
def test_which_failures_each_kind_of_call_is_sent_again_after(
    outcome: Step, repeated: set[Repeat]
) -> None:
    assert {r for r in Repeat if worth_repeating(outcome, r)} == repeated


# -- the clients' loops ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_429_is_tried_again_after_its_retry_after(kind: str) -> None:
    server = Server(refused("0.05"), ok(SEARCH_ANSWER))

    started = time.monotonic()
    hits = call(kind, server, "search", "bees", user_id="u1")

    assert time.monotonic() - started >= 0.05
    assert [h.id for h in hits] == ["m1"]
    assert len(server.requests) == 2
    assert server.requests[0].content == server.requests[1].content


@pytest.mark.parametrize("kind", KINDS)
def test_a_503_twice_then_an_answer(kind: str) -> None:
    server = Server(unavailable("0"), unavailable(), ok(MEMORY))

    assert call(kind, server, "get", "m1").memory == "keeps bees"
    assert len(server.requests) == 3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("first", [*NOT_SENT, refused()], ids=lambda s: type(s).__name__)
def test_a_post_that_could_act_twice_is_retried_when_it_was_never_taken(
    kind: str, first: Step
) -> None:
    server = Server(first, ok(KEY, 201))

    assert call(kind, server, "create_key", "t1").key == "mq_new"
    assert len(server.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("failure", [unavailable("0"), *ANSWER_LOST], ids=repr)
@pytest.mark.parametrize(
    ("method", "args"),
    [("create_key", ("t1",)), ("add_batch", ([{"messages": "hi"}],)), ("retry", ("j1",))],
)
def test_a_post_that_could_act_twice_is_not_sent_again_once_it_may_have_arrived(
    kind: str, failure: Step, method: str, args: tuple[Any, ...]
) -> None:
    server = Server(failure, ok(KEY, 201))

    with pytest.raises(UnavailableError):
        call(kind, server, method, *args)
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", [None, "idem-7"])
def test_an_add_whose_answer_was_lost_is_sent_again_as_the_same_job(
    kind: str, key: str | None
) -> None:
    """The server makes the same conversation (or key) the same job, so sending it again
    cannot make a second one; the SDK adds no key of its own, which would make two jobs of a
    conversation the caller posts twice on purpose."""
    server = Server(httpx.ReadTimeout("read timed out"), unavailable("0"), ok(ACCEPTED, 202))

    accepted = call(kind, server, "add", "hi", user_id="u1", idempotency_key=key)

    assert accepted.job_id == "j1"
    assert len(server.requests) == 3
    assert len({r.content for r in server.requests}) == 1
    assert json.loads(server.requests[0].content) == {
        "messages": "hi",
        "user_id": "u1",
        "infer": True,
    }
    assert [r.headers.get("idempotency-key") for r in server.requests] == [key] * 3


@pytest.mark.parametrize("kind", KINDS)
def test_spent_retries_raise_the_rate_limit_error_with_its_retry_after(kind: str) -> None:
    server = Server(refused("0.01"))

    with pytest.raises(RateLimitError) as raised:
        call(kind, server, "search", "bees", user_id="u1")

    assert (raised.value.status, raised.value.type) == (429, "rate_limited")
    assert raised.value.retry_after_s == 0.01
    assert len(server.requests) == 3  # the call, then max_retries=2 more


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("failure", [refused("0"), unavailable("0"), NOT_SENT[0]], ids=repr)
def test_max_retries_zero_sends_a_call_once(kind: str, failure: Step) -> None:
    server = Server(failure, ok(MEMORY))

    with pytest.raises((RateLimitError, UnavailableError)):
        call(kind, server, "get", "m1", max_retries=0)
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_retry_after_beyond_the_cap_is_raised_at_once(kind: str) -> None:
    server = Server(refused("300"), ok(MEMORY))

    with pytest.raises(RateLimitError) as raised:
        call(kind, server, "get", "m1")
    assert raised.value.retry_after_s == 300.0
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("probe", "failure"),
    [("readyz", unavailable("0")), ("healthz", NOT_SENT[0])],
)
def test_the_health_probes_report_the_moment(kind: str, probe: str, failure: Step) -> None:
    server = Server(failure, ok({"status": "ok"}))

    with pytest.raises(UnavailableError):
        call(kind, server, probe)
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_waiting_for_a_job_rides_out_a_503(kind: str) -> None:
    done = {**JOB, "status": "succeeded"}
    server = Server(ok(ACCEPTED, 202), unavailable("0"), ok(done))

    job = call(kind, server, "add", "hi", user_id="u1", wait=True, wait_timeout_s=0.05)

    assert job.status == "succeeded"
    assert [r.method for r in server.requests] == ["POST", "GET", "GET"]


def test_with_options_copies_the_client_with_other_retries() -> None:
    server = Server(unavailable("0"))
    with Client(BASE_URL, "k", transport=httpx.MockTransport(server), backoff=FAST) as client:
        once = client.with_options(max_retries=0)
        with pytest.raises(UnavailableError):
            once.get("m1")
        assert len(server.requests) == 1
        with pytest.raises(UnavailableError):
            client.get("m1")
        assert len(server.requests) == 1 + 3
        assert (client.max_retries, once.max_retries) == (2, 0)
        assert once.with_options(backoff=Backoff()).max_retries == 0


def test_async_with_options_is_an_async_client() -> None:
    async def scenario() -> tuple[int, int]:
        transport = httpx.MockTransport(Server(unavailable("0")))
        async with AsyncClient(BASE_URL, "k", transport=transport, max_retries=5) as client:
            once = client.with_options(max_retries=1)
            assert isinstance(once, AsyncClient)
            return client.max_retries, once.max_retries

    assert asyncio.run(scenario()) == (5, 1)


# -- configuration ---------------------------------------------------------------------------


def test_max_retries_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_CLIENT_MAX_RETRIES", "0")
    server = Server(unavailable("0"))
    with Client(BASE_URL, "k", transport=httpx.MockTransport(server)) as client:
        assert client.max_retries == 0
        with pytest.raises(UnavailableError):
            client.get("m1")
    assert len(server.requests) == 1
    with Client(BASE_URL, "k", max_retries=4) as client:
        assert client.max_retries == 4  # the argument wins


@pytest.mark.parametrize("raw", ["-1", "two", "1.5"])
def test_a_bad_max_retries_in_the_environment_is_named(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("MEMQ_CLIENT_MAX_RETRIES", raw)

    with pytest.raises(MemqAPIError, match="MEMQ_CLIENT_MAX_RETRIES") as raised:
        Client(BASE_URL, "k")
    assert raised.value.type == "configuration"


@pytest.mark.parametrize(
    "make",
    [
        lambda: Client(BASE_URL, "k", max_retries=-1),
        lambda: AsyncClient(BASE_URL, "k", backoff=Backoff(first_s=-1.0)),
    ],
)
def test_negative_retry_settings_are_refused(make: Callable[[], object]) -> None:
    with pytest.raises(MemqAPIError) as raised:
        make()
    assert raised.value.type == "configuration"


def test_an_add_option_that_does_not_exist_is_a_type_error() -> None:
    server = Server(ok(ACCEPTED, 202))
    client = Client(BASE_URL, "k", transport=httpx.MockTransport(server))
    with client, pytest.raises(TypeError, match="user"):
        client.add("hi", user="u1")  # type: ignore[call-overload]
    assert server.requests == []
