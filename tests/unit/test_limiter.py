"""The adaptive limit on LLM calls in flight: the gate alone, then the OpenAI adapter against
the scripted provider over real HTTP, where a 429 is the provider's own answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial

import pytest

from pipeline.adapters.llm.limiter import AdaptiveLimit
from pipeline.adapters.llm.openai_llm import NO_BACKOFF, OpenAILLM
from pipeline.config import LLMConfig
from pipeline.domain.protocols import ChatMessage
from tests.fakellm import FakeLLMServer, ProviderModel


@contextmanager
def holding(limit: AdaptiveLimit, count: int) -> Iterator[list[threading.Event]]:
    """``count`` threads, each holding a slot (or waiting for one) until its event is set; on
    the way out every event is set and every thread joined."""
    releases = [threading.Event() for _ in range(count)]

    def run(release: threading.Event) -> None:
        with limit.slot():
            release.wait(10)

    threads = [threading.Thread(target=run, args=(event,)) for event in releases]
    for thread in threads:
        thread.start()
    try:
        yield releases
    finally:
        for release in releases:
            release.set()
        for thread in threads:
            thread.join(5)


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_no_more_than_the_ceiling_are_in_flight() -> None:
    limit = AdaptiveLimit(3)
    with holding(limit, 5):
        wait_for(lambda: limit.in_flight == 3)
        time.sleep(0.05)
        assert limit.in_flight == 3  # two wait for a slot
    assert limit.in_flight == 0


def test_a_refusal_drops_the_limit_below_the_calls_that_were_out() -> None:
    limit = AdaptiveLimit(16)
    with holding(limit, 16):
        wait_for(lambda: limit.in_flight == 16)
        # a refusal at exactly the limit (the provider still counted a call that had
        # returned) costs one call of concurrency, not half of them
        limit.throttled()
        assert limit.limit == 15
        # a second refusal of the same burst, answered while as many were out, changes nothing
        limit.throttled()
        assert limit.limit == 15


def test_refusals_answered_as_calls_leave_find_what_the_provider_holds() -> None:
    limit = AdaptiveLimit(16)
    with holding(limit, 16) as releases:
        wait_for(lambda: limit.in_flight == 16)
        # a provider holding 6 refuses 10 of the 16; each refusal leaves before the next
        for left, leaving in enumerate(releases[6:], start=1):
            limit.throttled()
            leaving.set()
            wait_for(partial(lambda out: limit.in_flight == out, 16 - left))
        assert limit.limit == 6


def test_the_limit_never_drops_below_one_and_grows_back_to_the_ceiling() -> None:
    limit = AdaptiveLimit(4)
    with limit.slot():
        limit.throttled()
    assert limit.limit == 1
    successes = 0
    while limit.limit < 4:
        limit.succeeded()
        successes += 1
    # each success adds 1/limit: 1, 2, 2.5, 2.9, 3.24, 3.55, 3.83, 4.09
    assert successes == 7
    for _ in range(10):
        limit.succeeded()
    assert limit.limit == 4


def test_a_waiting_call_starts_when_the_limit_grows() -> None:
    limit = AdaptiveLimit(2)
    with limit.slot(), limit.slot():
        limit.throttled()  # two out, refused: one at a time from now on
    assert limit.limit == 1
    with holding(limit, 2):
        wait_for(lambda: limit.in_flight == 1)
        limit.succeeded()  # 1 -> 2: the waiting thread gets its slot without a release
        wait_for(lambda: limit.in_flight == 2)


def test_a_ceiling_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AdaptiveLimit(0)


MESSAGES = [ChatMessage("system", "extract facts"), ChatMessage("user", "I like tea")]


def test_the_adapter_settles_on_what_the_provider_holds_without_a_storm() -> None:
    """A process allowed 12 calls at once meets a provider that holds 4 and asks for no wait
    (Retry-After: 0, so nothing but the limit spaces the retries). Every call succeeds; the
    refusals are the first burst's 8 and the probes of the additive increase (about one per
    round of 4 calls), not a storm of instant retries."""
    with FakeLLMServer() as server:
        server.provider = ProviderModel(median_s=0.1, p95_s=0.1, limit=4, retry_after_s=0)
        config = LLMConfig(
            base_url=server.base_url, model="m", timeout_s=5.0, max_retries=8, max_concurrency=12
        )
        with OpenAILLM(config, None, NO_BACKOFF) as llm, ThreadPoolExecutor(12) as pool:
            replies = list(pool.map(lambda _: llm.complete_json(MESSAGES), range(48)))
        assert len(replies) == 48
        assert len(server.chat_requests()) == 48
        # measured 10 to 13; halving once a second instead let 82 to 108 through, and calls
        # ran out of retries
        assert server.refused <= 8 + 48 // 4 + 4
