"""Succeeded means findable: once a job is reported ``succeeded``, its memories are found by
search, listing and get at once, by any API process, with no wait for Elasticsearch's periodic
refresh (1 s).

Writes go through the session's API process; reads go through a second API process of their
own, so nothing the writing process does after the job ends (its ``?wait=true`` path) can be
what makes them visible. Jobs are followed both ways a caller does: ``?wait=true``, and
polling the job until it has succeeded. Most rounds are ``infer=false`` (one raw turn, one
memory); some run the extraction path (the scripted model states the facts, entities linked).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from pipeline.domain.jobs import JobStatus
from tests.conftest import admin_key, running
from tests.fakellm import FakeLLMServer
from tests.integration.test_api import Tenant, create_tenant, http_client, wait_until
from tests.integration.test_pipeline import facts_from_conversation
from tests.processes import ApiProcess, WorkerProcess, free_port

pytestmark = pytest.mark.integration

RAW_ROUNDS = 100
EXTRACTED_ROUNDS = 20


@dataclass
class Reader:
    """The tenant's key on the second API process."""

    http: httpx.Client
    misses: list[str] = field(default_factory=list)

    def check(self, user_id: str, memory_id: str, text: str) -> None:
        """Search, listing and get, each at once; every one that misses is recorded."""
        body = {"query": text, "user_id": user_id}
        found = self.http.post("/v1/memories/search", json=body)
        assert found.status_code == 200, found.text
        if memory_id not in [hit["id"] for hit in found.json()["results"]]:
            self.misses.append(f"search {memory_id} ({text!r})")
        listing = self.http.get("/v1/memories", params={"user_id": user_id, "page_size": 100})
        assert listing.status_code == 200, listing.text
        if memory_id not in [item["id"] for item in listing.json()["results"]]:
            self.misses.append(f"listing {memory_id}")
        got = self.http.get(f"/v1/memories/{memory_id}")
        if got.status_code != 200:
            self.misses.append(f"get {memory_id}: HTTP {got.status_code}")


@pytest.fixture(scope="module")
def reader_url(
    test_env: dict[str, str], worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A second ``memq api`` process over the same indices and queues."""
    env = {**test_env, "MEMQ_API_PORT": str(free_port()), "MEMQ_API_ADMIN_KEY": admin_key()}
    process = ApiProcess(env, tmp_path_factory.mktemp("reader-api") / "api.log")
    with running(process, process.wait_ready):
        yield process.url


@pytest.fixture(scope="module")
def writer_and_reader(api_url: str, reader_url: str) -> Iterator[tuple[Tenant, Reader]]:
    with http_client(api_url, admin_key()) as admin:
        tenant = create_tenant(admin, api_url, "ryw")
        with http_client(reader_url, tenant.key) as reader:
            yield tenant, Reader(reader)
        tenant.http.close()
        admin.delete(f"/v1/admin/keys/{tenant.key_id}")


@pytest.fixture
def scripted(fake_llm: FakeLLMServer) -> Iterator[FakeLLMServer]:
    fake_llm.reset()
    fake_llm.responder = facts_from_conversation
    yield fake_llm
    fake_llm.reset()


def add(tenant: Tenant, body: dict[str, Any], wait: bool) -> dict[str, Any]:
    """Add and follow the job until it has succeeded: ``?wait=true``, or polling its status."""
    if wait:
        response = tenant.http.post("/v1/memories", params={"wait": "true"}, json=body)
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
    else:
        response = tenant.http.post("/v1/memories", json=body)
        assert response.status_code == 202, response.text
        url = response.json()["status_url"]
        job = wait_until(lambda: ended(tenant.http.get(url).json()), "the job to end", 60)
    assert job["status"] == JobStatus.SUCCEEDED, job
    return job


def ended(job: dict[str, Any]) -> dict[str, Any] | None:
    return job if job["status"] in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.DEAD) else None


def test_a_raw_turn_is_found_the_moment_its_job_has_succeeded(
    writer_and_reader: tuple[Tenant, Reader],
) -> None:
    tenant, reader = writer_and_reader
    user_id = f"ryw-{uuid.uuid4().hex[:10]}"
    for i in range(RAW_ROUNDS):
        text = f"Round {i} token {uuid.uuid4().hex[:12]} names the {i}th lighthouse"
        body = {"messages": text, "user_id": user_id, "infer": False}
        (result,) = add(tenant, body, wait=i % 2 == 0)["results"]
        reader.check(user_id, result["id"], text)
    assert reader.misses == [], f"{len(reader.misses)} misses in {RAW_ROUNDS} rounds"


def test_extracted_facts_are_found_the_moment_their_job_has_succeeded(
    writer_and_reader: tuple[Tenant, Reader], scripted: FakeLLMServer
) -> None:
    tenant, reader = writer_and_reader
    for i in range(EXTRACTED_ROUNDS):
        user_id = f"ryw-{uuid.uuid4().hex[:10]}"  # one session each: no waiting for a turn
        fact = f"Ada Lovelace keeps hive {i} near tag {uuid.uuid4().hex[:12]}"
        body = {"messages": f"fact: {fact}", "user_id": user_id}
        job = add(tenant, body, wait=i % 2 == 1)
        assert [r["memory"] for r in job["results"]] == [fact], job
        reader.check(user_id, job["results"][0]["id"], fact)
    assert reader.misses == [], f"{len(reader.misses)} misses in {EXTRACTED_ROUNDS} rounds"
