"""The scripted server's provider model, which the realistic-model benchmarks rely on: answer
latency with the asked median and p95, and 429 with Retry-After beyond the concurrency limit."""

from __future__ import annotations

import random
import statistics
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.fakellm import FakeLLMServer, ProviderModel, forwarding


def test_latency_has_the_asked_median_and_p95() -> None:
    model = ProviderModel(median_s=1.0, p95_s=3.0)
    rng = random.Random(7)
    samples = sorted(model.latency(rng) for _ in range(20_000))
    assert statistics.median(samples) == pytest.approx(1.0, rel=0.05)
    assert samples[int(0.95 * len(samples))] == pytest.approx(3.0, rel=0.06)
    # lognormal: mean = median * exp(sigma^2 / 2), about 1.25 s here
    assert statistics.fmean(samples) == pytest.approx(1.25, rel=0.05)


@pytest.mark.parametrize(
    "fields", [{"median_s": 0.0}, {"median_s": 2.0, "p95_s": 1.0}, {"limit": 0}]
)
def test_an_inconsistent_model_is_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="inconsistent provider model"):
        ProviderModel(**fields)  # type: ignore[arg-type]


def chat(base_url: str) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=10)


def test_requests_beyond_the_limit_are_refused_429_with_retry_after() -> None:
    with FakeLLMServer() as server:
        # constant 0.5 s answers (median = p95), two at a time
        server.provider = ProviderModel(median_s=0.5, p95_s=0.5, limit=2, retry_after_s=7)
        with ThreadPoolExecutor(max_workers=5) as pool:
            replies = list(pool.map(lambda _: chat(server.base_url), range(5)))
        statuses = sorted(r.status_code for r in replies)
        assert statuses == [200, 200, 429, 429, 429]
        refused = [r for r in replies if r.status_code == 429]
        assert all(r.headers["retry-after"] == "7" for r in refused)
        assert all(r.json()["error"]["code"] == "rate_limit" for r in refused)
        assert server.refused == 3
        assert len(server.chat_requests()) == 2  # refused requests are not recorded
        # the slots are free again once the answers are out
        assert chat(server.base_url).status_code == 200


def test_reset_turns_the_model_off() -> None:
    with FakeLLMServer() as server:
        server.provider = ProviderModel(median_s=0.01, p95_s=0.02, limit=1)
        assert chat(server.base_url).status_code == 200
        server.reset()
        assert server.provider is None and server.refused == 0
        with ThreadPoolExecutor(max_workers=4) as pool:
            replies = list(pool.map(lambda _: chat(server.base_url), range(4)))
        assert [r.status_code for r in replies] == [200] * 4


def test_a_provider_set_over_the_admin_route_refuses_and_is_counted() -> None:
    """How the benchmarks drive the server as a process: ``POST /_script`` with a provider,
    ``GET /_counts``; a provider of ``null`` answers at once again."""
    with FakeLLMServer() as server:
        admin = server.base_url.removesuffix("/v1")
        provider = {"median_s": 0.3, "p95_s": 0.4, "limit": 1, "retry_after_s": 2, "seed": 3}
        assert httpx.post(f"{admin}/_script", json={"provider": provider}).status_code == 200
        with ThreadPoolExecutor(3) as pool:
            statuses = sorted(r.status_code for r in pool.map(chat, [server.base_url] * 3))
        assert statuses[0] == 200 and statuses[-1] == 429
        counts = httpx.get(f"{admin}/_counts").json()
        assert counts == {
            "chat": statuses.count(200),
            "embeddings": 0,
            "refused": statuses.count(429),
        }
        assert httpx.post(f"{admin}/_script", json={"provider": None}).status_code == 200
        assert server.provider is None
        bad = httpx.post(f"{admin}/_script", json={"provider": {"median_s": 0}})
        assert bad.status_code == 400


def test_a_forwarding_responder_replies_what_its_url_answers() -> None:
    """``--responder-url``: the unscripted chat request goes to the URL, its answer is the reply."""
    with FakeLLMServer() as replier, FakeLLMServer() as server:
        replier.script_chat('{"memory": [{"text": "forwarded"}]}')
        # The replier answers with an OpenAI body; its text is what the forwarding gets back.
        server.responder = forwarding(f"{replier.base_url}/chat/completions")
        answer = chat(server.base_url).json()["choices"][0]["message"]["content"]
        assert "forwarded" in answer
        assert replier.chat_requests()[0]["messages"][0]["content"] == "hi"
