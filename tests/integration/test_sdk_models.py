"""The SDK's answer models (``memq.types``) against a real API process: one test per model,
each checking that a real answer parses into it with typed fields (datetimes are datetimes,
nested lists are models), plus the pagers, the environment variables and the token counts of
a job that called the (scripted) model.

Near-real-time reads (search, listing, batch counts) are polled with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest

from memq import AsyncClient, Client
from memq.types import (
    Batch,
    BatchAccepted,
    Deleted,
    Explain,
    Health,
    HistoryEntry,
    Job,
    JobAccepted,
    KeyCreated,
    Memory,
    MemoryEvent,
    MemoryPage,
    Message,
    Readiness,
    SearchHit,
)
from tests.conftest import admin_key
from tests.fakellm import FakeLLMServer
from tests.integration.test_sdk import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def admin(api_url: str) -> Iterator[Client]:
    with Client(api_url, admin_key()) as client:
        eventually(lambda: client.healthz().status == "ok" or None, "the API", 30.0)
        yield client


@pytest.fixture(scope="module")
def key(admin: Client) -> Iterator[KeyCreated]:
    created = admin.create_key(f"sdkm-{uuid.uuid4().hex[:8]}", name="sdk model tests")
    yield created
    admin.revoke_key(created.id)


@pytest.fixture
def client(api_url: str, key: KeyCreated) -> Iterator[Client]:
    with Client(api_url, key.key) as sdk:
        yield sdk


@pytest.fixture
def user(client: Client) -> Iterator[str]:
    user_id = f"user-{uuid.uuid4().hex[:8]}"
    yield user_id
    client.delete_all(user_id=user_id)


def stored(client: Client, text: str, user: str) -> Job:
    accepted = client.add(text, user_id=user, infer=False)
    job = client.wait_for(accepted, timeout_s=60.0)
    assert job.status == "succeeded", job
    return job


def test_key_created(key: KeyCreated) -> None:
    assert isinstance(key, KeyCreated)
    assert key.tenant.startswith("sdkm-") and key.key.startswith("mq_") and key.id


def test_job_accepted(client: Client, user: str) -> None:
    accepted = client.add("I grow basil on the balcony", user_id=user, infer=False)

    assert isinstance(accepted, JobAccepted)
    assert accepted.created is True and accepted.status_url.endswith(accepted.job_id)
    assert accepted["job_id"] == accepted.job_id  # dict-style reads still work
    client.wait_for(accepted)


def test_job_with_memory_events_and_dates(client: Client, user: str) -> None:
    job = stored(client, "I take the night train to Vienna", user)

    assert isinstance(job, Job) and job.finished
    assert isinstance(job.created_at, datetime) and isinstance(job.finished_at, datetime)
    [event] = job.results
    assert isinstance(event, MemoryEvent)
    assert (event.memory, event.event) == ("I take the night train to Vienna", "ADD")
    assert job.counts["stored"] == 1 and "extract" in job.timings_ms
    assert job.usage.total_tokens == 0  # infer=False: no model call
    assert client.job(job.job_id) == job
    assert json.loads(json.dumps(job.to_dict()))["job_id"] == job.job_id


def test_job_usage_counts_the_tokens_of_the_model_calls(
    client: Client, user: str, fake_llm: FakeLLMServer
) -> None:
    fact = "The user is learning Portuguese"
    fake_llm.script_chat(json.dumps({"memory": [{"text": fact, "attributed_to": "user"}]}))

    job = client.add("I started Portuguese lessons", user_id=user, wait=True)

    assert isinstance(job, Job) and job.status == "succeeded", job
    assert [e.memory for e in job.results] == [fact]
    assert job.usage.prompt_tokens > 0 and job.usage.completion_tokens > 0
    assert job.counts["llm_calls"] == 1


def test_memory(client: Client, user: str) -> None:
    job = stored(client, "My cat is called Miso", user)

    memory = client.get(job.results[0].id)

    assert isinstance(memory, Memory)
    assert (memory.memory, memory.user_id) == ("My cat is called Miso", user)
    assert isinstance(memory.created_at, datetime)
    updated = client.update(memory.id, metadata={"pet": "cat"})
    assert isinstance(updated, Memory) and updated.metadata == {"pet": "cat"}


def test_search_hit_with_explain(client: Client, user: str) -> None:
    job = stored(client, "I brew espresso every morning", user)
    memory_id = job.results[0].id

    def hit() -> SearchHit | None:
        hits = client.search("espresso", user_id=user, explain=True)
        return next((h for h in hits if h.id == memory_id), None)

    found = eventually(hit, "the memory to be searchable")
    assert isinstance(found, SearchHit) and isinstance(found.explain, Explain)
    assert found.score > 0 and found.explain.fused >= 0
    [[again]] = client.search_many([{"query": "espresso", "user_id": user, "top_k": 1}])
    assert isinstance(again, SearchHit) and again.id == memory_id


def test_memory_page_and_the_pager(client: Client, user: str) -> None:
    for n in range(3):
        stored(client, f"paged fact {n}", user)

    def listed() -> list[MemoryPage] | None:
        pages = list(client.get_all(user_id=user, page_size=2).pages())
        return pages if sum(len(p.results) for p in pages) >= 3 else None

    pages = eventually(listed, "three memories listed")
    assert all(isinstance(p, MemoryPage) for p in pages)
    assert [len(p.results) for p in pages][:2] == [2, 1]
    assert pages[0].next_cursor is not None
    memories = list(client.get_all(user_id=user, page_size=2))
    assert all(isinstance(m, Memory) for m in memories)
    assert sorted(m.memory for m in memories) == [f"paged fact {n}" for n in range(3)]
    first = client.page(user_id=user, page_size=2)
    assert [m.id for m in first.results] == [m.id for m in pages[0].results]


def test_history_entry_and_message(client: Client, user: str) -> None:
    job = stored(client, "I play chess on Fridays", user)
    memory_id = job.results[0].id

    deleted = client.delete(memory_id)

    assert isinstance(deleted, Message) and deleted.message
    history = client.history(memory_id)
    assert all(isinstance(row, HistoryEntry) for row in history)
    assert [row.event for row in history] == ["ADD", "DELETE"]
    assert all(isinstance(row.created_at, datetime) for row in history)


def test_deleted(client: Client, user: str) -> None:
    stored(client, "I keep a diary", user)
    eventually(lambda: list(client.get_all(user_id=user)) or None, "the memory listed")

    answer = client.delete_all(user_id=user)

    assert isinstance(answer, Deleted) and answer.deleted == 1


def test_batch_accepted_and_batch(client: Client, user: str) -> None:
    items = [{"messages": f"batched {n}", "user_id": user, "infer": False} for n in range(2)]

    accepted = client.add_batch(items)

    assert isinstance(accepted, BatchAccepted)
    assert all(isinstance(job, JobAccepted) for job in accepted.jobs)
    for job in accepted.jobs:
        client.wait_for(job)

    def counted() -> Batch | None:
        batch = client.batch(accepted.batch_id)
        return batch if batch.counts.get("succeeded") == 2 else None

    batch = eventually(counted, "the batch counts")
    assert isinstance(batch, Batch) and batch.total == 2


def test_health_and_readiness(client: Client) -> None:
    health, ready = client.healthz(), client.readyz()
    assert isinstance(health, Health) and health.status == "ok"
    assert isinstance(ready, Readiness) and ready.ready is True


def test_async_client_returns_the_same_models(api_url: str, key: KeyCreated, user: str) -> None:
    async def scenario() -> tuple[Job, list[Memory]]:
        async with AsyncClient(api_url, key.key) as sdk:
            job = await sdk.add("I cycle to work", user_id=user, infer=False, wait=True)
            assert isinstance(job, Job)
            for _ in range(150):  # the listing is near-real-time
                pages = [page async for page in sdk.get_all(user_id=user).pages()]
                if pages[0].results:
                    break
                await asyncio.sleep(0.1)
            return job, [m async for m in sdk.get_all(user_id=user)]

    job, memories = asyncio.run(scenario())

    assert job.status == "succeeded"
    assert [m.id for m in memories] == [job.results[0].id]
    assert all(isinstance(m, Memory) for m in memories)


def test_client_from_environment_and_memq_status_beside_it(
    api_url: str, key: KeyCreated, test_env: dict[str, str]
) -> None:
    """``Client()`` reads MEMQ_CLIENT_URL and MEMQ_CLIENT_API_KEY; the server's settings
    ignore them, so ``memq status`` in the same environment still works."""
    env = {**test_env, "MEMQ_CLIENT_URL": api_url, "MEMQ_CLIENT_API_KEY": key.key}
    script = "import memq\nwith memq.Client() as c:\n    print(c.healthz().status, c.base_url)\n"

    sdk = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    status = subprocess.run(
        [sys.executable, "-m", "memq.cli", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert sdk.returncode == 0, sdk.stderr
    assert sdk.stdout.split() == ["ok", api_url]
    assert status.returncode == 0, status.stderr
    assert "queues" in json.loads(status.stdout)
