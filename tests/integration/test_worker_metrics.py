"""The worker's Prometheus endpoint (``MEMQ_WORKER_METRICS_PORT``), scraped over HTTP from the
session's real worker process (a prefork pool: the figures come from its children, summed by
the main process). Counters are cumulative over the session, so each check compares a scrape
after a job with one taken before it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memq import Client
from memq.types import Job
from tests.conftest import admin_key
from tests.fakellm import FakeLLMServer
from tests.integration.test_sdk import eventually
from tests.processes import WorkerProcess

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(worker: WorkerProcess) -> Samples:
    """Every sample of the worker's /metrics, keyed by (name, sorted labels)."""
    port = worker.env["MEMQ_WORKER_METRICS_PORT"]
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    response.raise_for_status()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def client(api_url: str) -> Iterator[Client]:
    with Client(api_url, admin_key()) as admin:
        key = admin.create_key(f"metrics-{uuid.uuid4().hex[:8]}", name="worker metrics tests")
        with Client(api_url, key.key) as sdk:
            yield sdk
        admin.revoke_key(key.id)


def test_a_scrape_shows_phases_jobs_llm_calls_tokens_and_queues_after_a_job(
    worker: WorkerProcess, client: Client, fake_llm: FakeLLMServer, test_env: dict[str, str]
) -> None:
    before = scrape(worker)
    fact = {"text": "The user repairs old radios", "attributed_to": "user", "related": []}
    fake_llm.script_chat(json.dumps({"memory": [fact]}))

    job = client.add("I repair old radios", user_id=f"u-{uuid.uuid4().hex[:8]}", wait=True)
    assert isinstance(job, Job) and job.status == "succeeded", job

    def counted() -> Samples | None:  # the outcome is counted just after the record is saved
        after = scrape(worker)
        name = "memq_worker_jobs_total"
        ended = value(after, name, outcome="succeeded") > value(before, name, outcome="succeeded")
        return after if ended else None

    after = eventually(counted, "the succeeded job to be counted")
    for phase in ("context", "extract", "persist", "finalize"):
        name = "memq_worker_phase_seconds_count"
        assert value(after, name, phase=phase) > value(before, name, phase=phase), phase
    calls = "memq_llm_request_seconds_count"
    assert value(after, calls, outcome="ok") > value(before, calls, outcome="ok")
    for kind, spent in (
        ("prompt", job.usage.prompt_tokens),
        ("completion", job.usage.completion_tokens),
    ):
        grown = value(after, "memq_llm_tokens_total", kind=kind) - value(
            before, "memq_llm_tokens_total", kind=kind
        )
        assert grown >= spent > 0, kind
    queues = {labels for (name, labels) in after if name == "memq_queue_depth"}
    assert (("queue", test_env["MEMQ_QUEUES_IO"]),) in queues


def test_a_failed_job_is_counted_by_its_outcome(
    worker: WorkerProcess, client: Client, fake_llm: FakeLLMServer
) -> None:
    before = value(scrape(worker), "memq_worker_jobs_total", outcome="failed")
    fake_llm.script_chat("I cannot answer that in JSON, sorry.")

    job = client.add("a reply nobody can parse", user_id=f"u-{uuid.uuid4().hex[:8]}", wait=True)
    assert isinstance(job, Job) and job.status == "failed", job

    eventually(
        lambda: value(scrape(worker), "memq_worker_jobs_total", outcome="failed") > before or None,
        "the failed job to be counted",
    )
