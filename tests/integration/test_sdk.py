"""The Python SDK (``memq.Client``, ``memq.AsyncClient``) against a real API process.

Every test runs in a tenant created for this session with the admin key, under a user id of
its own, with ``infer=False`` (the stack has no LLM). A succeeded job's memories are readable
by id at once, but search, listing and batch counts read Elasticsearch near-real-time (after
the next index refresh, about a second): those checks poll a condition with a deadline
(``eventually``) rather than sleep a fixed time. The retries on 429 run against an API process
of their own, started with a search rate of 2 a second per tenant.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from memq import (
    AsyncClient,
    AuthenticationError,
    Client,
    MemqAPIError,
    NotFoundError,
    RateLimitError,
    UnavailableError,
    ValidationError,
)
from pipeline.domain.jobs import JobStatus
from pipeline.store.indices import IndexNames
from tests.conftest import admin_key, running
from tests.processes import ApiProcess, free_port

pytestmark = pytest.mark.integration

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], what: str, timeout_s: float = 15.0) -> T:
    """Call ``probe`` until it returns something other than ``None``; fail after
    ``timeout_s``. For reads that are near-real-time by design, never for job completion."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.1)


def api_is_up(admin: Client) -> bool | None:
    """True when the API answers; ``None`` (poll again) while it is down or restarting."""
    try:
        return admin.healthz().status == "ok" or None
    except UnavailableError:
        return None


@pytest.fixture(scope="module")
def admin(api_url: str) -> Iterator[Client]:
    with Client(api_url, admin_key()) as client:
        eventually(lambda: api_is_up(client), f"the API at {api_url}", 30.0)
        yield client


@pytest.fixture(scope="module")
def tenant_key(admin: Client) -> Iterator[dict[str, Any]]:
    """A key of a tenant of its own for this session, revoked at the end."""
    created = admin.create_key(f"sdk-{uuid.uuid4().hex[:8]}", name="sdk integration tests")
    yield created
    admin.revoke_key(created["id"])


@pytest.fixture
def client(api_url: str, tenant_key: dict[str, Any]) -> Iterator[Client]:
    with Client(api_url, tenant_key["key"]) as sdk:
        yield sdk


@pytest.fixture
def user(client: Client) -> Iterator[str]:
    """A user id of this test's own; its memories are deleted afterwards (best effort)."""
    user_id = f"user-{uuid.uuid4().hex[:8]}"
    yield user_id
    client.delete_all(user_id=user_id)


def add_and_wait(client: Client, text: str, user_id: str, **options: Any) -> dict[str, Any]:
    accepted = client.add(text, user_id=user_id, infer=False, **options)
    job = client.wait_for(accepted, timeout_s=60.0)
    assert job["status"] == JobStatus.SUCCEEDED, job
    return job


def memory_ids(client: Client, user_id: str) -> list[str]:
    return [memory["id"] for memory in client.get_all(user_id=user_id)]


# -- jobs ------------------------------------------------------------------------------------


def test_add_then_wait_for_succeeds_with_results(client: Client, user: str) -> None:
    accepted = client.add("I keep bees on the roof", user_id=user, infer=False)
    assert accepted["created"] is True
    assert accepted["status_url"].endswith(f"/v1/jobs/{accepted['job_id']}")

    job = client.wait_for(accepted["job_id"], timeout_s=60.0)

    assert job["status"] == JobStatus.SUCCEEDED
    assert [(r["memory"], r["event"]) for r in job["results"]] == [
        ("I keep bees on the roof", "ADD")
    ]
    assert job["counts"]["stored"] == 1
    assert client.job(job["job_id"])["status"] == JobStatus.SUCCEEDED


def test_add_with_wait_returns_the_finished_job(client: Client, user: str) -> None:
    job = client.add("My sister lives in Lyon", user_id=user, infer=False, wait=True)

    assert job["status"] == JobStatus.SUCCEEDED
    assert job["results"][0]["memory"] == "My sister lives in Lyon"
    assert job["finished_at"] is not None


def test_the_same_idempotency_key_gives_the_same_job(client: Client, user: str) -> None:
    key = f"idem-{uuid.uuid4().hex}"
    first = client.add("I play the cello", user_id=user, infer=False, idempotency_key=key)
    again = client.add("I play the cello", user_id=user, infer=False, idempotency_key=key)

    assert again["job_id"] == first["job_id"]
    assert (first["created"], again["created"]) == (True, False)
    assert client.wait_for(first)["status"] == JobStatus.SUCCEEDED


# -- memories --------------------------------------------------------------------------------


def test_search_returns_the_memory(client: Client, user: str) -> None:
    job = add_and_wait(client, "My favourite drink is oolong tea", user)
    memory_id = job["results"][0]["id"]

    def hit() -> dict[str, Any] | None:
        hits = client.search("oolong tea", user_id=user, top_k=5)
        return next((h for h in hits if h["id"] == memory_id), None)

    found = eventually(hit, "the memory to be searchable")
    assert found["memory"] == "My favourite drink is oolong tea"
    [[again]] = client.search_many([{"query": "oolong", "user_id": user, "top_k": 1}])
    assert again["id"] == memory_id


def test_get_update_history_and_delete(client: Client, user: str) -> None:
    job = add_and_wait(client, "I drive a red bike", user)
    memory_id = job["results"][0]["id"]
    assert client.get(memory_id)["memory"] == "I drive a red bike"

    updated = client.update(memory_id, text="I drive a blue bike", metadata={"colour": "blue"})
    assert (updated["memory"], updated["metadata"]) == ("I drive a blue bike", {"colour": "blue"})
    events = [row["event"] for row in client.history(memory_id)]
    assert events == ["ADD", "UPDATE"]

    client.delete(memory_id)
    with pytest.raises(NotFoundError) as raised:
        client.get(memory_id)
    assert raised.value.status == 404
    assert [row["event"] for row in client.history(memory_id)] == ["ADD", "UPDATE", "DELETE"]


def test_get_with_sources_names_the_message_and_the_job(
    api_url: str, tenant_key: dict[str, Any], client: Client, user: str
) -> None:
    job = add_and_wait(client, "I keep bees on the roof", user)
    memory_id = job["results"][0]["id"]
    assert client.get(memory_id).provenance is None
    memory = client.get(memory_id, include_sources=True)
    assert memory.provenance is not None and memory.provenance.known
    [source] = memory.provenance.sources
    assert (source.content, source.role, source.seq) == ("I keep bees on the roof", "user", 0)
    assert source.job_id == job["job_id"] and source.timestamp is not None
    assert memory.provenance.job is not None and memory.provenance.job.id == job["job_id"]

    async def read() -> Any:
        async with AsyncClient(api_url, tenant_key["key"]) as sdk:
            return await sdk.get(memory_id, include_sources=True)

    assert asyncio.run(read()).provenance == memory.provenance


def test_get_all_follows_every_page_without_duplicates(client: Client, user: str) -> None:
    accepted = [
        client.add(f"fact number {n} about gardening", user_id=user, infer=False) for n in range(5)
    ]
    assert all(client.wait_for(job)["status"] == JobStatus.SUCCEEDED for job in accepted)

    def all_five() -> list[str] | None:
        ids = [m["id"] for m in client.get_all(user_id=user, page_size=2)]
        return ids if len(set(ids)) >= 5 else None

    ids = eventually(all_five, "five memories in the listing")
    assert len(ids) == len(set(ids)) == 5
    texts = {m["memory"] for m in client.get_all(user_id=user, filters={"text": "*"})}
    assert texts == {f"fact number {n} about gardening" for n in range(5)}


def test_delete_all_empties_the_scope(client: Client, user: str) -> None:
    add_and_wait(client, "I collect stamps", user)
    add_and_wait(client, "I collect coins", user)
    eventually(lambda: len(memory_ids(client, user)) == 2 or None, "both memories listed")

    assert client.delete_all(user_id=user)["deleted"] == 2

    assert memory_ids(client, user) == []


def test_add_batch_and_its_counts(client: Client, user: str) -> None:
    items = [{"messages": f"batch item {n}", "user_id": user, "infer": False} for n in range(3)]
    accepted = client.add_batch(items)
    assert len(accepted["jobs"]) == 3
    assert all(client.wait_for(job)["status"] == JobStatus.SUCCEEDED for job in accepted["jobs"])

    def counted() -> dict[str, Any] | None:
        try:
            batch = client.batch(accepted["batch_id"])
        except NotFoundError:  # the batch's job records are not searchable yet
            return None
        return batch if batch["counts"].get(JobStatus.SUCCEEDED) == 3 else None

    batch = eventually(counted, "the batch counts")
    assert (batch["batch_id"], batch["total"]) == (accepted["batch_id"], 3)


# -- errors ----------------------------------------------------------------------------------


def test_a_wrong_key_is_an_authentication_error(api_url: str) -> None:
    with Client(api_url, "mq_nope_nope") as wrong, pytest.raises(AuthenticationError) as raised:
        wrong.job("anything")
    assert (raised.value.status, raised.value.type) == (401, "unauthorized")


def test_a_tenant_key_cannot_create_keys(client: Client) -> None:
    with pytest.raises(AuthenticationError) as raised:
        client.create_key("someone-else")
    assert raised.value.status == 403


def test_a_revoked_key_is_refused(api_url: str, admin: Client, tenant_key: dict[str, Any]) -> None:
    extra = admin.create_key(tenant_key["tenant"], name="revoked at once")
    admin.revoke_key(extra["id"])
    with Client(api_url, extra["key"]) as revoked, pytest.raises(AuthenticationError):
        revoked.job("anything")


def test_a_missing_scope_is_a_validation_error_naming_user_id(client: Client) -> None:
    with pytest.raises(ValidationError) as raised:
        client.add("no scope at all", infer=False)
    assert (raised.value.status, raised.value.field) == (422, "user_id")
    with pytest.raises(ValidationError):
        client.search("anything")


def test_an_unknown_job_is_not_found(client: Client) -> None:
    with pytest.raises(NotFoundError) as raised:
        client.job(str(uuid.uuid4()))
    assert raised.value.type == "not_found"


def test_a_closed_port_is_unavailable() -> None:
    nowhere = Client("http://127.0.0.1:9", "any", timeout_s=5.0)
    with nowhere, pytest.raises(UnavailableError) as raised:
        nowhere.healthz()
    assert raised.value.status is None
    assert isinstance(raised.value, MemqAPIError)


def test_health_and_readiness(client: Client) -> None:
    assert client.healthz().to_dict() == {"status": "ok"}
    assert client.readyz()["ready"] is True


# -- the async client ------------------------------------------------------------------------


def test_async_client_adds_waits_and_searches(
    api_url: str, tenant_key: dict[str, Any], user: str
) -> None:
    async def scenario() -> tuple[dict[str, Any], list[str]]:
        async with AsyncClient(api_url, tenant_key["key"]) as sdk:
            accepted = await sdk.add("I swim in the lake at dawn", user_id=user, infer=False)
            job = await sdk.wait_for(accepted, timeout_s=60.0)
            deadline = time.monotonic() + 15.0
            hits = await sdk.search("swim lake", user_id=user)
            while not hits and time.monotonic() < deadline:  # near-real-time search
                await asyncio.sleep(0.1)
                hits = await sdk.search("swim lake", user_id=user)
            listed = [m["id"] async for m in sdk.get_all(user_id=user)]
            return job, [h["id"] for h in hits] + listed

    job, ids = asyncio.run(scenario())

    assert job["status"] == JobStatus.SUCCEEDED
    assert ids[0] == job["results"][0]["id"]
    assert set(ids) == {job["results"][0]["id"]}


# -- retries on 429, against an API limited to 2 searches a second per tenant ----------------

SEARCHES_PER_S = 2


@pytest.fixture(scope="module")
def limited_api(
    test_env: dict[str, str], indices: IndexNames, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The URL of a real ``memq api`` process that takes ``SEARCHES_PER_S`` searches per
    tenant in each one-second window; searches need no worker."""
    env = {
        **test_env,
        "MEMQ_API_PORT": str(free_port()),
        "MEMQ_API_ADMIN_KEY": admin_key(),
        "MEMQ_API_RATE_SEARCH_PER_S": str(SEARCHES_PER_S),
        "MEMQ_API_RATE_WINDOW_S": "1",
    }
    process = ApiProcess(env, Path(tmp_path_factory.mktemp("limited-api")) / "api.log")
    with running(process, process.wait_ready), Client(process.url, admin_key()) as admin:
        warm = admin.create_key(f"sdk-warm-{uuid.uuid4().hex[:8]}")
        with Client(process.url, warm.key) as sdk:
            sdk.search("loads the embedding model", user_id="warm")
        admin.revoke_key(warm.id)
        yield process.url


@pytest.fixture
def limited_key(limited_api: str) -> Iterator[str]:
    """A key of a tenant of its own on the limited API (the limit is per tenant)."""
    with Client(limited_api, admin_key()) as admin:
        created = admin.create_key(f"sdk-rate-{uuid.uuid4().hex[:8]}")
        yield created.key
        admin.revoke_key(created.id)


def test_searches_over_the_rate_raise_rate_limit_error_without_retries(
    limited_api: str, limited_key: str
) -> None:
    with Client(limited_api, limited_key, max_retries=0) as sdk:
        answers: list[Any] = []
        for n in range(4 * SEARCHES_PER_S):
            try:
                answers.append(sdk.search(f"bees {n}", user_id="u1"))
            except RateLimitError as exc:
                answers.append(exc)

    refusals = [a for a in answers if isinstance(a, RateLimitError)]
    assert refusals, "no search was refused"
    assert all((r.status, r.type) == (429, "rate_limited") for r in refusals)
    assert all(r.retry_after_s is not None and 0 < r.retry_after_s <= 1 for r in refusals)


def test_with_retries_every_search_over_the_rate_succeeds(
    limited_api: str, limited_key: str
) -> None:
    """One retry is enough for a caller searching one at a time: the server's Retry-After
    sends it back once its window has ended, never before."""
    searches = 4 * SEARCHES_PER_S
    with Client(limited_api, limited_key, max_retries=1) as sdk:
        started = time.monotonic()
        answers = [sdk.search(f"bees {n}", user_id="u1") for n in range(searches)]
        elapsed_s = time.monotonic() - started

    assert len(answers) == searches
    assert elapsed_s >= searches / SEARCHES_PER_S - 1  # the windows were waited out


def test_async_searches_at_once_all_succeed_with_retries(
    limited_api: str, limited_key: str
) -> None:
    async def scenario() -> int:
        async with AsyncClient(limited_api, limited_key, max_retries=6) as sdk:
            hits = await asyncio.gather(
                *(sdk.search(f"bees {n}", user_id="u1") for n in range(3 * SEARCHES_PER_S))
            )
            return len(hits)

    assert asyncio.run(scenario()) == 3 * SEARCHES_PER_S
