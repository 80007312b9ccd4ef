"""The per-tenant rate limit's ``Retry-After``, on the real Redis: a caller that waits as long as
it says is served, never sent back before its window has ended (Redis's whole-second TTL, which
rounds, would say 1 s with 1.3 s of a window left)."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from api.limits import RateLimitedError, TenantLimits
from pipeline.config import Settings

pytestmark = pytest.mark.integration


def test_waiting_the_retry_after_of_a_refusal_is_enough(
    stack_settings: Settings, redis_client: redis.Redis
) -> None:
    config = stack_settings.api.model_copy(update={"rate_search_per_s": 1, "rate_window_s": 2})
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    limits = TenantLimits(config, redis_client, stack_settings.redis.url, namespace)
    limits.charge("t1", "search", cost=2)  # the window's two searches
    time.sleep(0.7)  # 1.3 s of the window left

    with pytest.raises(RateLimitedError) as refused:
        limits.charge("t1", "search")
    assert refused.value.retry_after_s == 2
    time.sleep(refused.value.retry_after_s)

    limits.charge("t1", "search")  # a new window: served
