"""``GET /v1/jobs`` and ``memq jobs`` on the real stack: a tenant's jobs newest first, filtered
by status, scope, batch and time, paged by cursor; no tenant sees another's; a failed job is
found with its reason."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

import memq
from tests.conftest import admin_key
from tests.fakellm import Fail, FakeLLMServer
from tests.processes import WorkerProcess

pytestmark = pytest.mark.integration


def new_tenant(api_url: str) -> httpx.Client:
    created = httpx.post(
        f"{api_url}/v1/admin/keys",
        json={"tenant": f"joblist-{uuid.uuid4().hex[:8]}"},
        headers={"Authorization": f"Bearer {admin_key()}"},
        timeout=30,
    )
    created.raise_for_status()
    key = created.json()["key"]
    return httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.fixture(scope="module")
def tenant(api_url: str, worker: WorkerProcess) -> Iterator[httpx.Client]:
    with new_tenant(api_url) as client:
        yield client


def add(client: httpx.Client, user: str, text: str, infer: bool = False) -> dict[str, Any]:
    body = {"messages": text, "user_id": user, "infer": infer}
    answer = client.post("/v1/memories", params={"wait": "true"}, json=body)
    assert answer.status_code == 200, answer.text
    job: dict[str, Any] = answer.json()
    return job


def jobs(client: httpx.Client, **params: Any) -> dict[str, Any]:
    answer = client.get("/v1/jobs", params=params)
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


def test_jobs_are_listed_newest_first_by_status_scope_and_time_a_page_at_a_time(
    tenant: httpx.Client, fake_llm: FakeLLMServer
) -> None:
    user, other = f"u-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    began = datetime.now(UTC)
    done = [add(tenant, user, f"Note {i}: the shed is green.")["job_id"] for i in range(5)]
    fake_llm.script_chat(Fail(400, "the model refused this conversation"))
    failed = add(tenant, other, "Something the model refuses.", infer=True)
    assert failed["status"] == "failed", failed

    time.sleep(1.2)  # the jobs index refreshes every second: a listing is a search
    mine = jobs(tenant, user_id=user, limit=2)
    seen = [j["job_id"] for j in mine["results"]]
    cursor = mine["next_cursor"]
    while cursor:
        page = jobs(tenant, user_id=user, limit=2, cursor=cursor)
        seen += [j["job_id"] for j in page["results"]]
        cursor = page["next_cursor"]
    assert seen == done[::-1]  # newest first, every job once across pages
    assert {j["user_id"] for j in mine["results"]} == {user}

    bad = jobs(tenant, status="failed,dead", since=began.isoformat())
    assert [j["job_id"] for j in bad["results"]] == [failed["job_id"]]
    assert "refused" in (bad["results"][0]["reason"] or "")
    assert jobs(tenant, status="failed", until=began.isoformat())["results"] == []

    wrong = tenant.get("/v1/jobs", params={"status": "exploded"})
    assert wrong.status_code == 422 and "status must be one of" in wrong.text
    other_filter = tenant.get("/v1/jobs", params={"user_id": other, "cursor": mine["next_cursor"]})
    assert other_filter.status_code == 422, other_filter.text

    cli = subprocess.run(
        [sys.executable, "-m", "memq.cli", "jobs", "--status", "failed", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    lines = [json.loads(line) for line in cli.stdout.splitlines()]
    assert failed["job_id"] in {line["job_id"] for line in lines}


def test_no_tenant_lists_another_tenants_jobs(tenant: httpx.Client, api_url: str) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    job = add(tenant, user, "Only mine.")
    time.sleep(1.2)
    with new_tenant(api_url) as stranger:
        assert jobs(stranger, user_id=user)["results"] == []
        assert job["job_id"] not in {j["job_id"] for j in jobs(stranger, limit=200)["results"]}


def test_the_sdk_pages_through_jobs_sync_and_async(tenant: httpx.Client, api_url: str) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    began = datetime.now(UTC)
    done = [add(tenant, user, f"Pager note {i}.")["job_id"] for i in range(3)]
    time.sleep(1.2)
    key = tenant.headers["Authorization"].removeprefix("Bearer ")
    with memq.Client(base_url=api_url, api_key=key) as client:
        listed = list(client.jobs(user_id=user, limit=2, since=began))
        assert [j.job_id for j in listed] == done[::-1]  # newest first, across two pages
        assert all(isinstance(j, memq.Job) and j.user_id == user for j in listed)
        pages = list(client.jobs(user_id=user, limit=2).pages())
        assert [len(p.results) for p in pages] == [2, 1]
        assert list(client.jobs(user_id=user, status=["failed", "dead"])) == []

    async def walk() -> list[str]:
        async with memq.AsyncClient(base_url=api_url, api_key=key) as sdk:
            return [j.job_id async for j in sdk.jobs(user_id=user, status="succeeded", limit=2)]

    assert asyncio.run(walk()) == done[::-1]
