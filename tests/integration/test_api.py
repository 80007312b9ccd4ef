"""The HTTP API over real HTTP: every endpoint, and tenant isolation between two keys on every
endpoint that reads or changes a tenant's data.

The API is a real ``memq api`` process of this checkout (the ``api_url`` fixture) over the test
indices and queues, served by the test worker; Elasticsearch and Redis are the stack's, and the
admin key is the stack's bootstrap key (``MEMQ_API_ADMIN_KEY``, else
``/var/lib/memq/admin-key``). Every add is ``infer=false``. A missing service fails the run;
nothing skips.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from pipeline.config import Settings
from pipeline.domain.jobs import JobStatus
from pipeline.features.webhook import tenant_signing_key
from tests.conftest import admin_key
from tests.processes import ApiProcess, WorkerProcess

pytestmark = pytest.mark.integration

T = TypeVar("T")
TIMEOUT_S = 30.0
JOB_KEYS = {"job_id", "status", "phase", "batch_id", "attempts", "counts", "timings_ms"}
EXPLAIN_KEYS = {"semantic", "bm25", "entity", "fused", "rank_semantic", "rank_bm25"}


@dataclass
class Tenant:
    name: str
    key_id: str
    key: str
    http: httpx.Client


def http_client(base_url: str, key: str | None) -> httpx.Client:
    """A client that retries connecting (the API may restart briefly while others work)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(
        base_url=base_url,
        headers=headers,
        timeout=TIMEOUT_S + 30,
        transport=httpx.HTTPTransport(retries=5),
    )


def wait_until(probe: Callable[[], T | None], what: str, timeout_s: float = TIMEOUT_S) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)


def remember(tenant: Tenant, user_id: str, text: str, **extra: Any) -> dict[str, Any]:
    """Add one message with ``wait=true``; the finished job's first result (the memory)."""
    body = {"messages": text, "user_id": user_id, "infer": False, **extra}
    response = tenant.http.post("/v1/memories", params={"wait": "true"}, json=body)
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["status"] == JobStatus.SUCCEEDED, job
    assert job["results"], job
    result: dict[str, Any] = job["results"][0]
    return result


def list_all(tenant: Tenant, page_size: int = 100, **params: Any) -> list[list[dict[str, Any]]]:
    """Every page of a listing, following ``next_cursor``."""
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        query = {**params, "page_size": page_size, **({"cursor": cursor} if cursor else {})}
        response = tenant.http.get("/v1/memories", params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append(body["results"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


def listed(tenant: Tenant, **params: Any) -> list[dict[str, Any]]:
    return [item for page in list_all(tenant, **params) for item in page]


def wait_listed(tenant: Tenant, user_id: str, count: int) -> list[dict[str, Any]]:
    """Listing reads a refreshed index: wait until ``count`` memories of the user show."""
    return wait_until(
        lambda: (items := listed(tenant, user_id=user_id)) and len(items) >= count and items,
        f"{count} memories of {user_id} to be listed",
    )


def search_ids(tenant: Tenant, user_id: str, query: str, **extra: Any) -> list[str]:
    body = {"query": query, "user_id": user_id, **extra}
    response = tenant.http.post("/v1/memories/search", json=body)
    assert response.status_code == 200, response.text
    return [hit["id"] for hit in response.json()["results"]]


def assert_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body["error"]) == {"type", "message", "field"}, body
    assert body["detail"] == body["error"]["message"]
    return body


@pytest.fixture(scope="module")
def base_url(api_url: str) -> str:
    return api_url


@pytest.fixture(scope="module")
def admin(base_url: str) -> Iterator[httpx.Client]:
    with http_client(base_url, admin_key()) as client:
        yield client


def create_tenant(admin: httpx.Client, base_url: str, label: str) -> Tenant:
    name = f"apitest-{label}-{uuid.uuid4().hex[:10]}"
    response = admin.post("/v1/admin/keys", json={"tenant": name, "name": f"test {label}"})
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["tenant"] == name
    assert created["key"].startswith(f"mq_{created['id']}_")
    return Tenant(name, created["id"], created["key"], http_client(base_url, created["key"]))


@contextmanager
def temporary_tenant(base_url: str, label: str) -> Iterator[Tenant]:
    """A tenant key of its own for the block (``create_tenant``), revoked after it."""
    with http_client(base_url, admin_key()) as admin:
        created = create_tenant(admin, base_url, label)
        try:
            yield created
        finally:
            created.http.close()
            admin.delete(f"/v1/admin/keys/{created.key_id}")


@pytest.fixture(scope="module")
def tenants(admin: httpx.Client, base_url: str) -> Iterator[tuple[Tenant, Tenant]]:
    """Two tenant keys with unique tenant names, revoked at the end."""
    first = create_tenant(admin, base_url, "a")
    second = create_tenant(admin, base_url, "b")
    yield first, second
    for tenant in (first, second):
        tenant.http.close()
        admin.delete(f"/v1/admin/keys/{tenant.key_id}")


@pytest.fixture
def a(tenants: tuple[Tenant, Tenant]) -> Tenant:
    return tenants[0]


@pytest.fixture
def b(tenants: tuple[Tenant, Tenant]) -> Tenant:
    return tenants[1]


@pytest.fixture
def uid(tenants: tuple[Tenant, Tenant]) -> Iterator[str]:
    """A fresh user id; its memories are deleted (in both tenants) after the test."""
    user_id = f"user-{uuid.uuid4().hex[:12]}"
    yield user_id
    for tenant in tenants:
        tenant.http.delete("/v1/memories", params={"user_id": user_id})


# --- job webhooks' signing key -------------------------------------------------------------


def test_a_tenant_reads_its_own_webhook_signing_key(
    a: Tenant, b: Tenant, settings: Settings
) -> None:
    answer = a.http.get("/v1/webhook-secret")
    secret = settings.webhook.signing_secret
    if secret is None:  # signing off: said so, not a 500 nor an empty key
        assert "not enabled" in assert_error(answer, 404)["error"]["message"]
        return
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "key": tenant_signing_key(secret.get_secret_value(), a.name),
        "header": "X-Memq-Signature",
        "timestamp_header": "X-Memq-Timestamp",
    }
    assert b.http.get("/v1/webhook-secret").json()["key"] != answer.json()["key"]


# --- health and metrics ---------------------------------------------------------------------


def test_healthz(base_url: str) -> None:
    response = httpx.get(f"{base_url}/healthz", timeout=10)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_reports_both_services_ok(base_url: str) -> None:
    response = httpx.get(f"{base_url}/readyz", timeout=10)
    assert response.status_code == 200, response.text
    body = response.json()
    # no key needed, so nothing but up or down
    assert body == {"ready": True, "elasticsearch": "up", "redis": "up"}


def test_metrics_are_prometheus_text(a: Tenant, uid: str, base_url: str) -> None:
    remember(a, uid, "metrics need at least one job")

    def scraped() -> str | None:
        """Jobs by status are counted in Elasticsearch, near-real-time (within a refresh)."""
        response = httpx.get(
            f"{base_url}/metrics", headers={"authorization": f"Bearer {admin_key()}"}, timeout=10
        )
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        return (
            response.text
            if f'memq_jobs{{status="{JobStatus.SUCCEEDED}"}}' in response.text
            else None
        )

    text = wait_until(scraped, "the succeeded job in the metrics", 10.0)
    assert "# TYPE memq_http_requests_total counter" in text
    assert 'memq_http_requests_total{method="POST",route="/v1/memories",status="200"}' in text
    assert f'memq_jobs{{status="{JobStatus.SUCCEEDED}"}}' in text
    assert "memq_queue_depth{queue=" in text


def test_metrics_span_every_tenant_so_they_need_an_admin_key(a: Tenant, base_url: str) -> None:
    assert httpx.get(f"{base_url}/metrics", timeout=10).status_code == 401
    as_tenant = a.http.get("/metrics")
    assert as_tenant.status_code == 403 and "memq_jobs" not in as_tenant.text


# --- intake and jobs ------------------------------------------------------------------------


def test_add_answers_202_with_a_job_to_poll(a: Tenant, uid: str) -> None:
    body = {"messages": [{"role": "user", "content": "I keep bees"}], "user_id": uid}
    response = a.http.post("/v1/memories", json={**body, "infer": False})
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["created"] is True
    assert accepted["status"] in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    assert accepted["status_url"].endswith(f"/v1/jobs/{accepted['job_id']}")
    job = wait_until(
        lambda: (
            (j := a.http.get(accepted["status_url"]).json())["status"] == JobStatus.SUCCEEDED and j
        ),
        "the job to succeed",
    )
    assert set(job) >= JOB_KEYS
    assert job["job_id"] == accepted["job_id"]
    assert job["finished_at"] is not None
    assert [r["memory"] for r in job["results"]] == ["I keep bees"]
    assert job["results"][0]["event"] == "ADD"


def test_add_with_wait_answers_200_with_the_finished_job(a: Tenant, uid: str) -> None:
    body = {"messages": "My sister lives in Lyon", "user_id": uid, "infer": False}
    response = a.http.post("/v1/memories", params={"wait": "true"}, json=body)
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["status"] == JobStatus.SUCCEEDED
    assert job["counts"]["stored"] == 1
    assert job["errors"] == []
    (result,) = job["results"]
    assert result["memory"] == "My sister lives in Lyon"
    assert result["event"] == "ADD"
    assert a.http.get(f"/v1/memories/{result['id']}").json()["user_id"] == uid


def test_idempotency_key_returns_the_same_job(a: Tenant, b: Tenant, uid: str) -> None:
    key = f"idem-{uuid.uuid4().hex}"
    headers = {"Idempotency-Key": key}
    first = a.http.post(
        "/v1/memories", headers=headers, json={"messages": "one", "user_id": uid, "infer": False}
    )
    again = a.http.post(
        "/v1/memories", headers=headers, json={"messages": "two", "user_id": uid, "infer": False}
    )
    assert first.status_code == again.status_code == 202, again.text
    assert first.json()["created"] is True
    assert again.json()["created"] is False
    assert again.json()["job_id"] == first.json()["job_id"]
    other = b.http.post(
        "/v1/memories", headers=headers, json={"messages": "one", "user_id": uid, "infer": False}
    )
    assert other.status_code == 202, other.text
    assert other.json()["created"] is True, "an Idempotency-Key is per tenant"
    assert other.json()["job_id"] != first.json()["job_id"]


def test_the_same_body_twice_is_the_same_job(a: Tenant, uid: str) -> None:
    body = {"messages": "I run on Sundays", "user_id": uid, "infer": False}
    first = a.http.post("/v1/memories", json=body)
    second = a.http.post("/v1/memories", json=body)
    assert first.status_code == second.status_code == 202
    assert second.json()["job_id"] == first.json()["job_id"]
    assert (first.json()["created"], second.json()["created"]) == (True, False)


def test_retrying_a_succeeded_job_is_refused(a: Tenant, uid: str) -> None:
    response = a.http.post(
        "/v1/memories",
        params={"wait": "true"},
        json={"messages": "a finished job", "user_id": uid, "infer": False},
    )
    job_id = response.json()["job_id"]
    body = assert_error(a.http.post(f"/v1/jobs/{job_id}/retry"), 422)
    assert JobStatus.SUCCEEDED in body["error"]["message"]


def test_unknown_job_is_404(a: Tenant) -> None:
    assert_error(a.http.get(f"/v1/jobs/{uuid.uuid4()}"), 404)
    assert_error(a.http.post(f"/v1/jobs/{uuid.uuid4()}/retry"), 404)


def test_batch_runs_every_item(a: Tenant, uid: str) -> None:
    items = [{"messages": f"batch fact {i}", "user_id": uid, "infer": False} for i in range(3)]
    response = a.http.post("/v1/batches", json={"items": items})
    assert response.status_code == 202, response.text
    batch = response.json()
    assert len(batch["jobs"]) == 3
    assert all(job["created"] for job in batch["jobs"])
    assert batch["status_url"].endswith(f"/v1/batches/{batch['batch_id']}")
    status = wait_until(
        lambda: (
            (s := a.http.get(batch["status_url"]).json()).get("counts") == {JobStatus.SUCCEEDED: 3}
            and s
        ),
        "the batch's three jobs to succeed",
    )
    assert status == {"batch_id": batch["batch_id"], "total": 3, "counts": {JobStatus.SUCCEEDED: 3}}
    job = a.http.get(f"/v1/jobs/{batch['jobs'][0]['job_id']}").json()
    assert job["batch_id"] == batch["batch_id"]
    texts = {item["memory"] for item in wait_listed(a, uid, 3)}
    assert texts == {f"batch fact {i}" for i in range(3)}


def test_unknown_batch_is_404(a: Tenant) -> None:
    assert_error(a.http.get(f"/v1/batches/{uuid.uuid4()}"), 404)


# --- listing --------------------------------------------------------------------------------


def test_listing_pages_with_a_cursor(a: Tenant, uid: str) -> None:
    items = [{"messages": f"page fact {i:02d}", "user_id": uid, "infer": False} for i in range(7)]
    batch = a.http.post("/v1/batches", json={"items": items}).json()
    wait_until(
        lambda: a.http.get(batch["status_url"]).json().get("counts") == {JobStatus.SUCCEEDED: 7},
        "the batch to succeed",
    )
    wait_listed(a, uid, 7)
    pages = list_all(a, page_size=2, user_id=uid)
    assert [len(page) for page in pages] == [2, 2, 2, 1]
    memories = [item for page in pages for item in page]
    assert len({m["id"] for m in memories}) == 7
    assert {m["memory"] for m in memories} == {f"page fact {i:02d}" for i in range(7)}
    created = [m["created_at"] for m in memories]
    assert created == sorted(created), "oldest first"


def test_listing_filters(a: Tenant, uid: str) -> None:
    red = remember(a, uid, "the red bike", metadata={"color": "red", "rank": 1})
    blue = remember(a, uid, "the blue car", metadata={"color": "blue", "rank": 2})
    wait_listed(a, uid, 2)

    def ids(filters: dict[str, Any]) -> set[str]:
        return {m["id"] for m in listed(a, user_id=uid, filters=json.dumps(filters))}

    assert ids({"metadata.color": "red"}) == {red["id"]}
    assert ids({"color": {"in": ["red", "blue"]}}) == {red["id"], blue["id"]}
    assert ids({"NOT": {"color": "red"}}) == {blue["id"]}
    assert ids({"text": {"contains": "blue"}}) == {blue["id"]}
    assert ids({"color": "green"}) == set()


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ("{not json", "filters"),
        ("[1, 2]", "filters"),
        ('{"role": {"regex": "u.*"}}', "role.regex"),
        ('{"tenant": "someone-else"}', "tenant"),
    ],
)
def test_listing_refuses_bad_filters(a: Tenant, uid: str, filters: str, field: str) -> None:
    response = a.http.get("/v1/memories", params={"user_id": uid, "filters": filters})
    assert assert_error(response, 422)["error"]["field"] == field


def test_listing_needs_a_scope_id(a: Tenant) -> None:
    assert assert_error(a.http.get("/v1/memories"), 422)["error"]["field"] == "user_id"


# --- single memories ------------------------------------------------------------------------


def test_get_update_delete_and_history(a: Tenant, uid: str) -> None:
    memory_id = remember(a, uid, "I drive a Volvo", metadata={"topic": "cars"})["id"]
    got = a.http.get(f"/v1/memories/{memory_id}").json()
    assert (got["id"], got["memory"], got["user_id"]) == (memory_id, "I drive a Volvo", uid)
    assert got["metadata"] == {"topic": "cars"}

    response = a.http.put(f"/v1/memories/{memory_id}", json={"text": "I drive a Saab"})
    assert response.status_code == 200, response.text
    assert (response.json()["id"], response.json()["memory"]) == (memory_id, "I drive a Saab")
    response = a.http.put(f"/v1/memories/{memory_id}", json={"metadata": {"topic": "transport"}})
    assert response.json()["metadata"] == {"topic": "transport"}
    got = a.http.get(f"/v1/memories/{memory_id}").json()
    assert (got["memory"], got["metadata"]) == ("I drive a Saab", {"topic": "transport"})

    response = a.http.delete(f"/v1/memories/{memory_id}")
    assert response.status_code == 200, response.text
    assert_error(a.http.get(f"/v1/memories/{memory_id}"), 404)
    assert_error(a.http.delete(f"/v1/memories/{memory_id}"), 404)

    history = a.http.get(f"/v1/memories/{memory_id}/history")
    assert history.status_code == 200, history.text
    rows = history.json()
    assert [r["event"] for r in rows] == ["ADD", "UPDATE", "UPDATE", "DELETE"]
    assert all(r["memory_id"] == memory_id for r in rows)
    assert (rows[1]["old"], rows[1]["new"]) == ("I drive a Volvo", "I drive a Saab")
    assert rows[3]["old"] == "I drive a Saab"


def test_update_needs_something_to_change(a: Tenant, uid: str) -> None:
    memory_id = remember(a, uid, "nothing changes here")["id"]
    assert_error(a.http.put(f"/v1/memories/{memory_id}", json={}), 422)
    assert_error(a.http.put(f"/v1/memories/{memory_id}", json={"text": "   "}), 422)
    assert a.http.get(f"/v1/memories/{memory_id}").json()["memory"] == "nothing changes here"


def test_delete_a_scope(a: Tenant, uid: str) -> None:
    other = f"{uid}-other"
    remember(a, uid, "scope fact one")
    remember(a, uid, "scope fact two")
    kept = remember(a, other, "a fact of another user")
    wait_listed(a, uid, 2)
    response = a.http.delete("/v1/memories", params={"user_id": uid})
    assert response.status_code == 200, response.text
    assert response.json()["deleted"] == 2
    wait_until(lambda: listed(a, user_id=uid) == [], "the scope to be empty")
    assert a.http.get(f"/v1/memories/{kept['id']}").status_code == 200
    a.http.delete("/v1/memories", params={"user_id": other})


def test_delete_a_scope_needs_an_id(a: Tenant) -> None:
    assert assert_error(a.http.delete("/v1/memories"), 422)["error"]["field"] == "user_id"


def test_log_files_hold_no_user_id_and_no_text_a_tenant_sent(
    a: Tenant, api_process: ApiProcess, worker: WorkerProcess
) -> None:
    user, marker = f"loguser-{uuid.uuid4().hex[:8]}", f"Quoll{uuid.uuid4().hex[:10]}"
    body = {"messages": f"my secret is {marker}", "user_id": user, "infer": False}
    job = a.http.post("/v1/memories", params={"wait": "true"}, json=body).json()
    assert job["status"] == JobStatus.SUCCEEDED, job
    a.http.get("/v1/memories", params={"user_id": user, "filters": json.dumps({"x": marker})})
    a.http.post("/v1/memories/search", json={"query": marker, "user_id": user})
    assert a.http.delete(f"/v1/users/{user}").status_code == 200
    time.sleep(1)  # the access lines are written as the answers go out
    for process in (api_process, worker):
        text = process.log_path.read_text(errors="replace")
        assert user not in text and marker not in text, process.log_path


def test_api_and_worker_log_json_lines_with_job_tenant_phase_and_batch(
    a: Tenant, uid: str, api_process: ApiProcess, worker: WorkerProcess
) -> None:
    body = {"messages": "a line for the log", "user_id": uid, "infer": False}
    job = a.http.post("/v1/memories", json=body).json()["job_id"]

    def logged(log_path: Path) -> dict[str, Any] | None:
        for line in log_path.read_text().splitlines():
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("job_id") == job:
                return event
        return None

    event = wait_until(lambda: logged(api_process.log_path), "the API's line for the job", 5.0)
    assert (event["tenant"], event["level"], event["logger"]) == (a.name, "INFO", "memq.api")
    assert event["process_kind"] == "api"
    assert all(line.startswith("{") for line in api_process.log_path.read_text().splitlines())
    event = wait_until(lambda: logged(worker.log_path), "the worker's line for the job")
    assert (event["tenant"], event["phase"], event["process_kind"]) == (
        a.name,
        "finalize",
        "worker",
    )
    assert event["batch"] and event["message"] == f"job {job} succeeded"


def test_docs_and_their_assets_are_served_whole(base_url: str) -> None:
    """Through a real server: a streamed file must not be cut short by the body-limit layer."""
    with httpx.Client(base_url=base_url, timeout=30) as http:
        assert "swagger-ui-bundle.js" in http.get("/docs").text
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
            response = http.get(f"/docs-assets/{asset}")
            assert response.status_code == 200, asset
            assert len(response.content) == int(response.headers["content-length"]) > 100_000


# --- search ---------------------------------------------------------------------------------


def test_search_explains_and_filters(a: Tenant, uid: str) -> None:
    tea = remember(a, uid, "I drink green tea every morning", metadata={"kind": "drink"})
    remember(a, uid, "My dog is called Rex", metadata={"kind": "pet"})
    wait_listed(a, uid, 2)
    body = {"query": "what tea do I drink", "user_id": uid, "explain": True}
    response = a.http.post("/v1/memories/search", json=body)
    assert response.status_code == 200, response.text
    hits = response.json()["results"]
    assert hits[0]["id"] == tea["id"]
    assert hits[0]["memory"] == "I drink green tea every morning"
    assert set(hits[0]["explain"]) >= EXPLAIN_KEYS
    assert hits[0]["explain"]["rank"] == 1
    assert hits[0]["score"] >= hits[0]["explain"]["semantic"]  # the similarity scale
    assert tea["id"] not in search_ids(a, uid, "tea", filters={"kind": "pet"})
    assert search_ids(a, uid, "tea", filters={"kind": "drink"}) == [tea["id"]]


def test_search_takes_the_scope_inside_filters_as_mem0_writes_it(
    a: Tenant, b: Tenant, uid: str
) -> None:
    tea = remember(a, uid, "I drink green tea every morning", metadata={"kind": "drink"})
    remember(a, uid, "My dog is called Rex", metadata={"kind": "pet"})
    wait_listed(a, uid, 2)

    def found(tenant: Tenant, filters: dict[str, Any], **top: Any) -> list[str]:
        body = {"query": "what tea do I drink", "filters": filters, **top}
        response = tenant.http.post("/v1/memories/search", json=body)
        assert response.status_code == 200, response.text
        return [hit["id"] for hit in response.json()["results"]]

    assert found(a, {"user_id": uid})[0] == tea["id"]
    assert found(a, {"AND": [{"user_id": uid}, {"kind": "drink"}]}) == [tea["id"]]
    pets = found(a, {"user_id": uid, "kind": "pet"}, user_id=uid)  # named both ways, agreeing
    assert pets and tea["id"] not in pets
    assert found(b, {"user_id": uid}) == []  # the tenant still comes from the key
    body = {"query": "tea", "user_id": uid, "filters": {"user_id": "someone-else"}}
    error = assert_error(a.http.post("/v1/memories/search", json=body), 422)
    assert error["error"]["field"] == "user_id"
    assert_error(a.http.post("/v1/memories/search", json={"query": "tea", "filters": {}}), 422)


def test_search_batch_answers_in_order(a: Tenant, uid: str) -> None:
    tea = remember(a, uid, "I drink green tea every morning")
    dog = remember(a, uid, "My dog is called Rex")
    wait_listed(a, uid, 2)
    queries = [
        {"query": "dog name", "user_id": uid, "top_k": 1},
        {"query": "green tea", "user_id": uid, "top_k": 1},
    ]
    response = a.http.post("/v1/memories/search/batch", json={"queries": queries})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [[hit["id"] for hit in hits] for hits in results] == [[dog["id"]], [tea["id"]]]


# --- admin ----------------------------------------------------------------------------------


def test_reset_needs_an_admin_key(a: Tenant) -> None:
    assert_error(a.http.post("/v1/reset"), 403)


def test_admin_routes_need_an_admin_key(a: Tenant) -> None:
    assert_error(a.http.get("/v1/admin/keys"), 403)
    assert_error(a.http.post("/v1/admin/keys", json={"tenant": "x"}), 403)
    assert_error(a.http.delete(f"/v1/admin/keys/{a.key_id}"), 403)


def test_admin_lists_and_revokes_keys(admin: httpx.Client, base_url: str) -> None:
    tenant = create_tenant(admin, base_url, "revoke")
    with tenant.http:
        assert tenant.http.get("/v1/memories", params={"user_id": "nobody"}).status_code == 200
        listing = admin.get("/v1/admin/keys", params={"tenant": tenant.name})
        assert listing.status_code == 200, listing.text
        (row,) = listing.json()
        assert (row["id"], row["tenant"], row["role"]) == (tenant.key_id, tenant.name, "tenant")
        assert "secret_sha256" not in row
        assert tenant.key not in listing.text
        assert tenant.key_id in {k["id"] for k in admin.get("/v1/admin/keys").json()}

        assert admin.delete(f"/v1/admin/keys/{tenant.key_id}").status_code == 200
        assert_error(tenant.http.get("/v1/memories", params={"user_id": "nobody"}), 401)
        (row,) = admin.get("/v1/admin/keys", params={"tenant": tenant.name}).json()
        assert row.get("revoked_at")
    assert_error(admin.delete("/v1/admin/keys/0000000000000000"), 404)


def test_a_wrong_secret_is_401(a: Tenant, base_url: str) -> None:
    forged = f"mq_{a.key_id}_{'x' * 43}"
    with http_client(base_url, forged) as client:
        assert_error(client.get("/v1/memories", params={"user_id": "nobody"}), 401)


# --- tenant isolation -----------------------------------------------------------------------


@pytest.fixture
def a_memory(a: Tenant, uid: str) -> dict[str, Any]:
    """A memory of tenant A, already visible to listing and search."""
    memory = remember(a, uid, "The vault code is 4321", metadata={"secret": "yes"})
    wait_listed(a, uid, 1)
    return memory


def test_b_cannot_read_or_change_a_memory_of_a(
    a: Tenant, b: Tenant, a_memory: dict[str, Any]
) -> None:
    memory_id = a_memory["id"]
    assert_error(b.http.get(f"/v1/memories/{memory_id}"), 404)
    assert_error(b.http.put(f"/v1/memories/{memory_id}", json={"text": "hijacked"}), 404)
    assert_error(b.http.put(f"/v1/memories/{memory_id}", json={"metadata": {"x": 1}}), 404)
    assert_error(b.http.get(f"/v1/memories/{memory_id}/history"), 404)
    assert_error(b.http.delete(f"/v1/memories/{memory_id}"), 404)
    got = a.http.get(f"/v1/memories/{memory_id}").json()
    assert (got["memory"], got["metadata"]) == ("The vault code is 4321", {"secret": "yes"})
    assert [r["event"] for r in a.http.get(f"/v1/memories/{memory_id}/history").json()] == ["ADD"]


def test_b_cannot_read_a_memory_of_a_over_the_mem0_routes(
    b: Tenant, a_memory: dict[str, Any]
) -> None:
    memory_id = a_memory["id"]
    assert_error(b.http.get(f"/v1/memories/{memory_id}/"), 404)
    assert_error(b.http.put(f"/v1/memories/{memory_id}/", json={"text": "hijacked"}), 404)
    assert_error(b.http.get(f"/v1/memories/{memory_id}/history/"), 404)
    assert_error(b.http.delete(f"/v1/memories/{memory_id}/"), 404)
    batch = {"memories": [{"memory_id": memory_id, "text": "hijacked"}]}
    assert_error(b.http.put("/v1/batch/", json=batch), 404)
    assert_error(b.http.request("DELETE", "/v1/batch/", json=batch), 404)


def test_b_cannot_find_memories_of_a(
    a: Tenant, b: Tenant, uid: str, a_memory: dict[str, Any]
) -> None:
    assert search_ids(a, uid, "vault code") == [a_memory["id"]]
    assert search_ids(b, uid, "vault code") == []
    assert search_ids(b, uid, "vault code", filters={"secret": "yes"}) == []
    batch = {"queries": [{"query": "vault code", "user_id": uid}]}
    answer = b.http.post("/v1/memories/search/batch", json=batch).json()
    assert (answer["results"], answer["partial"]) == ([[]], False)
    assert listed(b, user_id=uid) == []
    mem0_search = {"query": "vault code", "filters": {"user_id": uid}}
    assert b.http.post("/v3/memories/search/", json=mem0_search).json()["results"] == []
    mem0_list = b.http.post("/v3/memories/", json={"filters": {"user_id": uid}}).json()
    assert (mem0_list["count"], mem0_list["results"]) == (0, [])


def test_b_cannot_delete_the_scope_of_a(
    a: Tenant, b: Tenant, uid: str, a_memory: dict[str, Any]
) -> None:
    response = b.http.delete("/v1/memories", params={"user_id": uid})
    assert response.status_code == 200, response.text
    assert response.json()["deleted"] == 0
    assert b.http.delete("/v1/memories/", params={"user_id": uid}).json()["deleted"] == 0
    assert a.http.get(f"/v1/memories/{a_memory['id']}").status_code == 200


def test_b_cannot_see_or_retry_a_job_of_a(a: Tenant, b: Tenant, uid: str) -> None:
    response = a.http.post(
        "/v1/memories",
        params={"wait": "true"},
        json={"messages": "a job of tenant A", "user_id": uid, "infer": False},
    )
    job_id = response.json()["job_id"]
    assert_error(b.http.get(f"/v1/jobs/{job_id}"), 404)
    assert_error(b.http.post(f"/v1/jobs/{job_id}/retry"), 404)
    assert a.http.get(f"/v1/jobs/{job_id}").json()["status"] == JobStatus.SUCCEEDED


def test_b_cannot_see_a_batch_of_a(a: Tenant, b: Tenant, uid: str) -> None:
    items = [{"messages": "a batch of tenant A", "user_id": uid, "infer": False}]
    batch = a.http.post("/v1/batches", json={"items": items}).json()
    wait_until(
        lambda: a.http.get(batch["status_url"]).json().get("counts") == {JobStatus.SUCCEEDED: 1},
        "the batch to succeed",
    )
    assert_error(b.http.get(f"/v1/batches/{batch['batch_id']}"), 404)
    assert_error(b.http.get(f"/v1/jobs/{batch['jobs'][0]['job_id']}"), 404)


def test_the_same_conversation_in_two_tenants_is_two_memories(
    a: Tenant, b: Tenant, uid: str
) -> None:
    in_a = remember(a, uid, "same words, two tenants")
    in_b = remember(b, uid, "same words, two tenants")
    assert in_a["id"] != in_b["id"]
    assert a.http.delete(f"/v1/memories/{in_a['id']}").status_code == 200
    assert b.http.get(f"/v1/memories/{in_b['id']}").status_code == 200
