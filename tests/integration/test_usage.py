"""Per-tenant usage and the monthly token budget on the real stack: the ledger in the real
Redis (the same rules as the in-process one), and through a real API and worker with the
scripted model, which reports token usage.

- the admin endpoint's figures equal the sums of the tenant's own job records;
- over its budget, a tenant's extraction is refused at the intake (429 naming the budget), a
  job accepted before fails with the same reason, raw adds still work, and raising the budget
  lets extraction run again at once;
- the usage and budget routes need an admin key; /metrics shows the tenant's figures.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis

from pipeline.domain.jobs import TERMINAL_STATUSES, JobStatus
from pipeline.features.usage import Charge, InMemoryUsage, Usage, UsageLedger
from pipeline.features.usage_redis import RedisUsage
from tests.conftest import admin_key
from tests.integration.test_api import Tenant, create_tenant, http_client, wait_until

# its autouse fixture: the scripted model answers one fact per 'fact: ...' line
from tests.integration.test_pipeline import scripted  # noqa: F401

pytestmark = pytest.mark.integration

DAY = date(2026, 3, 10)


# --- the ledger: Redis and in-process, one contract ---------------------------------------


@pytest.fixture(params=["redis", "memory"])
def ledger(request: pytest.FixtureRequest, redis_client: redis.Redis) -> Iterator[UsageLedger]:
    if request.param == "memory":
        yield InMemoryUsage()
        return
    namespace = f"usagetest-{uuid.uuid4().hex[:10]}"
    yield RedisUsage(redis_client, namespace)
    for key in redis_client.scan_iter(f"memq:{namespace}:*"):
        redis_client.delete(key)


def test_a_charge_applies_once_and_sums_by_day_month_and_tenant(ledger: UsageLedger) -> None:
    first = Charge("job-a:0", "t1", DAY, Usage(jobs=1, prompt_tokens=10, memories=2))
    again = Charge("job-a:0", "t1", DAY + timedelta(days=1), Usage(jobs=1, prompt_tokens=10))
    later = Charge("job-b:0", "t1", DAY + timedelta(days=1), Usage(jobs=1, completion_tokens=4))
    other = Charge("job-c:0", "t2", DAY, Usage(jobs=1, failed_jobs=1, embeddings=3))

    assert ledger.charge([first, again, later]) == 2
    assert ledger.charge([first, other]) == 1

    days = ledger.days("t1", DAY - timedelta(days=1), DAY + timedelta(days=1))
    assert [d.day for d in days] == [DAY - timedelta(days=1), DAY, DAY + timedelta(days=1)]
    assert [d.usage for d in days] == [
        Usage(),
        Usage(jobs=1, prompt_tokens=10, memories=2),
        Usage(jobs=1, completion_tokens=4),
    ]
    assert ledger.totals() == {
        "t1": Usage(jobs=2, prompt_tokens=10, completion_tokens=4, memories=2),
        "t2": Usage(jobs=1, failed_jobs=1, embeddings=3),
    }
    assert ledger.budget_state("t1", "2026-03").month_tokens == 14
    assert ledger.budget_state("t1", "2026-04").month_tokens == 0


def test_budgets_are_set_raised_and_removed(ledger: UsageLedger) -> None:
    assert ledger.budget_state("t1", "2026-03").budget is None
    ledger.set_budget("t1", 5)
    ledger.charge([Charge("j:0", "t1", DAY, Usage(prompt_tokens=5))])
    assert ledger.budget_state("t1", "2026-03").spent
    ledger.set_budget("t1", 6)
    assert not ledger.budget_state("t1", "2026-03").spent
    assert ledger.budgets() == {"t1": 6}
    ledger.set_budget("t1", None)
    assert ledger.budgets() == {} and ledger.budget_state("t1", "2026-03").budget is None


# --- through the API and the worker -------------------------------------------------------


@pytest.fixture
def admin(api_url: str) -> Iterator[httpx.Client]:
    with http_client(api_url, admin_key()) as client:
        yield client


@pytest.fixture
def tenant(admin: httpx.Client, api_url: str) -> Iterator[Tenant]:
    made = create_tenant(admin, api_url, "usage")
    yield made
    admin.delete(f"/v1/admin/budgets/{made.name}")
    made.http.close()


def add(tenant: Tenant, text: str, user_id: str = "u1", **extra: Any) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": text}], "user_id": user_id, **extra}
    return tenant.http.post("/v1/memories", json=body)


def ended(tenant: Tenant, job_id: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        job: dict[str, Any] = tenant.http.get(f"/v1/jobs/{job_id}").json()
        return job if job["status"] in TERMINAL_STATUSES else None

    return wait_until(probe, f"job {job_id} to end", 90)


def run(tenant: Tenant, text: str, **extra: Any) -> dict[str, Any]:
    response = add(tenant, text, **extra)
    assert response.status_code == 202, response.text
    return ended(tenant, response.json()["job_id"])


def usage_of(admin: httpx.Client, tenant: Tenant) -> dict[str, Any]:
    today = datetime.now(UTC).date()
    span = {"from": str(today - timedelta(days=1)), "to": str(today + timedelta(days=1))}
    response = admin.get("/v1/admin/usage", params={"tenant": tenant.name, **span})
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def set_budget(admin: httpx.Client, tenant: Tenant, tokens: int) -> dict[str, Any]:
    response = admin.put(f"/v1/admin/budgets/{tenant.name}", json={"monthly_tokens": tokens})
    assert response.status_code == 200, response.text
    budget: dict[str, Any] = response.json()
    return budget


def sums_of_records(tenant: Tenant, jobs_ended: int) -> dict[str, int] | None:
    """What the tenant's own job records count, summed (every job here ran once); None until
    the listing, which reads Elasticsearch near-real-time, shows ``jobs_ended`` ended jobs."""
    jobs = tenant.http.get("/v1/jobs", params={"limit": 100}).json()["results"]
    if sum(job["status"] in TERMINAL_STATUSES for job in jobs) != jobs_ended:
        return None
    counts = [job["counts"] for job in jobs]

    def total(key: str) -> int:
        return sum(c.get(key, 0) for c in counts)

    return {
        "jobs": len(jobs),
        "failed_jobs": sum(job["status"] != JobStatus.SUCCEEDED for job in jobs),
        "memories": total("stored"),
        "prompt_tokens": total("prompt_tokens"),
        "completion_tokens": total("completion_tokens"),
        "tokens": total("prompt_tokens") + total("completion_tokens"),
        "llm_calls": total("llm_calls"),
        "embeddings": total("embedded"),
    }


def test_the_admin_figures_match_the_tenants_job_records(
    admin: httpx.Client, tenant: Tenant
) -> None:
    run(tenant, "fact: Ana keeps bees\nfact: Ana lives in Porto")
    run(tenant, "fact: Ana rides a bike", user_id="u2")
    run(tenant, "stored as it is", infer=False)

    report = usage_of(admin, tenant)

    expected = wait_until(lambda: sums_of_records(tenant, 3), "3 ended jobs listed")
    assert expected["memories"] == 4 and expected["tokens"] > 0
    assert report["total"] == expected
    assert sum(day["tokens"] for day in report["days"]) == expected["tokens"]
    assert report["tenant"] == tenant.name and report["budget"]["monthly_tokens"] is None


def test_over_budget_extraction_fails_clearly_raw_adds_work_and_a_raise_restores_it(
    admin: httpx.Client, tenant: Tenant
) -> None:
    set_budget(admin, tenant, 1)
    # two jobs of one session, both accepted under the budget: the second runs after the
    # first has spent it, so it fails in extract with the budget's reason
    first = add(tenant, "fact: Ana paints")
    second = add(tenant, "fact: Ana sculpts")
    assert first.status_code == second.status_code == 202, second.text
    assert ended(tenant, first.json()["job_id"])["status"] == JobStatus.SUCCEEDED
    failed = ended(tenant, second.json()["job_id"])
    assert failed["status"] == JobStatus.FAILED and failed["phase"] == "extract"
    assert f"tenant {tenant.name}'s monthly token budget of 1 is spent" in failed["reason"]

    refused = add(tenant, "fact: Ana dances")
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["type"] == "budget_spent" and "monthly token budget of 1" in error["message"]
    assert "PUT /v1/admin/budgets/" in error["message"]
    assert int(refused.headers["Retry-After"]) > 0
    assert tenant.http.post(f"/v1/jobs/{failed['job_id']}/retry").status_code == 429

    raw = run(tenant, "I dance on Fridays", infer=False)
    assert raw["status"] == JobStatus.SUCCEEDED and raw["results"]

    budget = set_budget(admin, tenant, 10**6)
    assert not budget["spent"] and budget["month_tokens"] > 1
    assert run(tenant, "fact: Ana dances")["status"] == JobStatus.SUCCEEDED
    replayed = tenant.http.post(f"/v1/jobs/{failed['job_id']}/retry")
    assert replayed.status_code == 202, replayed.text
    assert ended(tenant, failed["job_id"])["status"] == JobStatus.SUCCEEDED

    listed = admin.get("/v1/admin/budgets").json()
    assert {"tenant": tenant.name, "monthly_tokens": 10**6}.items() <= next(
        b for b in listed if b["tenant"] == tenant.name
    ).items()


def test_usage_and_budgets_need_an_admin_key(tenant: Tenant) -> None:
    assert tenant.http.get("/v1/admin/usage", params={"tenant": tenant.name}).status_code == 403
    assert tenant.http.get("/v1/admin/budgets").status_code == 403
    put = tenant.http.put(f"/v1/admin/budgets/{tenant.name}", json={"monthly_tokens": 10**9})
    assert put.status_code == 403
    assert tenant.http.delete(f"/v1/admin/budgets/{tenant.name}").status_code == 403


def test_bad_spans_and_budgets_are_4xx(admin: httpx.Client, tenant: Tenant) -> None:
    backwards = {"tenant": tenant.name, "from": "2026-03-02", "to": "2026-03-01"}
    assert admin.get("/v1/admin/usage", params=backwards).status_code == 422
    assert (
        admin.get("/v1/admin/usage", params={"tenant": tenant.name, "from": "x"}).status_code == 422
    )
    assert admin.get("/v1/admin/usage").status_code == 422
    zero = admin.put(f"/v1/admin/budgets/{tenant.name}", json={"monthly_tokens": 0})
    assert zero.status_code == 422


def test_metrics_show_each_tenants_usage(admin: httpx.Client, tenant: Tenant) -> None:
    done = run(tenant, "fact: Ana reads")
    set_budget(admin, tenant, 10**6)
    tokens = done["counts"]["prompt_tokens"]
    series = f'memq_tenant_usage_total{{kind="prompt_tokens",tenant="{tenant.name}"}} {tokens}.0'

    text = admin.get("/metrics").text

    assert series in text
    assert f'memq_tenant_token_budget{{tenant="{tenant.name}"}} 1e+06' in text
    assert f'memq_tenant_month_tokens{{tenant="{tenant.name}"}}' in text
