"""An Elasticsearch outage mid-ingestion loses nothing and strands nothing: a PRIVATE node
(tests/private_es.py: the stack's distribution on ports of its own) is stopped while jobs run,
kept down for 30 s (and, marked ``slow``, 3 min), and started again on the same data. Every
job ends ``succeeded`` within RECOVERY_S of the node being healthy again (the test worker's
backoff cap is 2 s; the default cap is 60 s), with each memory stored exactly once."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.domain.jobs import TERMINAL_STATUSES, JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.store.client import make_client
from tests.private_services import PrivateElasticsearch
from tests.processes import WorkerProcess
from workers.app import MemqCelery, create_celery
from workers.intake import submit

pytestmark = pytest.mark.integration

TERMINAL = TERMINAL_STATUSES
RECOVERY_S = 120  # from the node healthy again to every job terminal
SESSIONS, JOBS_PER_SESSION = 8, 4


@pytest.fixture(scope="module")
def node(test_env: dict[str, str]) -> Iterator[PrivateElasticsearch]:
    private = PrivateElasticsearch(test_env)
    try:
        private.start()
        yield private
    finally:
        private.remove()


@pytest.fixture(scope="module")
def outage_env(test_env: dict[str, str], node: PrivateElasticsearch) -> dict[str, str]:
    """The test environment on the private node, with queues and a Redis namespace of its
    own (the session's worker must not take these jobs to the shared node)."""
    suffix = "esout"
    return {
        **test_env,
        "MEMQ_ES_URL": node.url,
        "MEMQ_ES_INDEX_PREFIX": f"{test_env['MEMQ_ES_INDEX_PREFIX']}-{suffix}",
        **{
            key: f"{test_env[key]}-{suffix}"
            for key in ("MEMQ_QUEUES_IO", "MEMQ_QUEUES_CPU", "MEMQ_QUEUES_BACKFILL")
        },
    }


@pytest.fixture(scope="module")
def outage_app(outage_env: dict[str, str], settings: Settings) -> Iterator[MemqCelery]:
    private = Settings.model_validate(
        {
            "es": settings.es.model_copy(
                update={
                    "url": outage_env["MEMQ_ES_URL"],
                    "urls": (outage_env["MEMQ_ES_URL"],),
                    "index_prefix": outage_env["MEMQ_ES_INDEX_PREFIX"],
                }
            ),
            "queues": settings.queues.model_copy(
                update={
                    "io": outage_env["MEMQ_QUEUES_IO"],
                    "cpu": outage_env["MEMQ_QUEUES_CPU"],
                    "backfill": outage_env["MEMQ_QUEUES_BACKFILL"],
                }
            ),
        }
    )
    app = create_celery(private)
    yield app
    app.close()


@pytest.fixture(scope="module")
def outage_worker(
    outage_env: dict[str, str], outage_app: MemqCelery, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    log_path: Path = tmp_path_factory.mktemp("esout") / "worker.log"
    process = WorkerProcess(outage_env, log_path)
    process.start()
    try:
        process.wait_ready(outage_app, timeout_s=120)
        yield process
    finally:
        process.stop()


def conversation(scope: Scope, job: int) -> AddRequest:
    said = [f"{scope.user_id} says line {line} of conversation {job}." for line in range(3)]
    messages = [
        MessageIn(role=role, content=text)  # type: ignore[arg-type]
        for role, text in zip(("user", "assistant", "user"), said, strict=True)
    ]
    return AddRequest(scope=scope, messages=messages, infer=False)


@pytest.mark.parametrize("outage_s", [30, pytest.param(180, marks=pytest.mark.slow)])
def test_an_elasticsearch_outage_mid_ingestion_loses_and_strands_nothing(
    node: PrivateElasticsearch,
    outage_app: MemqCelery,
    outage_worker: WorkerProcess,
    outage_s: int,
) -> None:
    tenant = f"esout-{uuid.uuid4().hex[:8]}"
    scopes = [Scope(tenant=tenant, user_id=f"u{i}") for i in range(SESSIONS)]
    requests = [conversation(s, job) for job in range(JOBS_PER_SESSION) for s in scopes]
    jobs = [submit(outage_app, request).record.job_id for request in requests]
    before = wait_until(outage_app, jobs, lambda s: JobStatus.SUCCEEDED in s.values(), 120)

    node.stop()  # mid-ingestion: some jobs done, the rest running or waiting their turn
    assert any(s not in TERMINAL for s in before.values()), "all ended before the outage"
    time.sleep(outage_s)
    node.start()

    final = wait_until(outage_app, jobs, lambda s: set(s.values()) <= set(TERMINAL), RECOVERY_S)
    assert set(final.values()) == {JobStatus.SUCCEEDED}, (
        Counter(final.values()),
        outage_worker.tail(),
    )
    stored = memories_of(make_client(outage_app.runtime.settings.es), outage_app, tenant)
    assert len(stored) == 3 * len(jobs)  # nothing lost
    assert len(set(stored)) == len(stored)  # nothing stored twice


def statuses(app: MemqCelery, jobs: list[str]) -> dict[str, str]:
    records = {job: app.runtime.store.get_job(job) for job in jobs}
    return {job: record.status if record else "missing" for job, record in records.items()}


def wait_until(
    app: MemqCelery, jobs: list[str], done: Callable[[dict[str, str]], bool], timeout_s: float
) -> dict[str, str]:
    """The jobs' statuses once ``done`` holds for them, or at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = statuses(app, jobs)
        if done(now) or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def memories_of(es: Elasticsearch, app: MemqCelery, tenant: str) -> list[tuple[str, str]]:
    """(user, hash) of every memory of the tenant."""
    index = app.runtime.store.names.memories
    es.indices.refresh(index=index)
    hits = es.search(index=index, query={"term": {"tenant": tenant}}, size=1000)["hits"]["hits"]
    return [(h["_source"]["user_id"], h["_source"]["hash"]) for h in hits]
