"""The scheduler's rules (``tests/unit/test_scheduler_rules.py``) over ``RedisStateStore`` and
``RunLeases`` on the real Redis, through their Lua scripts: the same tests that run over the
memory stores, with these fixtures instead. Each test has a namespace of its own, removed
after it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.unit import test_scheduler_rules as rules
from workers.scheduler.leases import RunLeases
from workers.scheduler.protocols import SchedulerLeases, SchedulerStates
from workers.scheduler.state_store import RedisStateStore

pytestmark = pytest.mark.integration

globals().update({name: test for name, test in vars(rules).items() if name.startswith("test_")})


@pytest.fixture
def namespace(redis_client: redis.Redis) -> Iterator[str]:
    namespace = f"scheduler-contract-{uuid.uuid4().hex[:12]}"
    yield namespace
    keys = list(redis_client.scan_iter(f"memq:{namespace}:*"))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def states(redis_client: redis.Redis, namespace: str) -> SchedulerStates:
    return RedisStateStore(redis_client, namespace)


@pytest.fixture
def leases(redis_client: redis.Redis, namespace: str) -> SchedulerLeases:
    return RunLeases(redis_client, namespace)
