"""A request id travels from the answer's ``X-Request-ID`` into the API's log lines, the job's
record and the worker's log lines (docs/ARCHITECTURE.md, logging), and a 500 names it.

The journey runs through the real ``memq api`` and ``memq worker`` processes of the session
(``api_process``, ``worker``), whose output goes to log files: JSON lines, as in production.
The 500 and the intake's side run ``create_app`` in this process over the test indices, with
an intake of the test's own, as the Intake protocol allows: one that fails like a bug, one
that keeps the ids it is handed."""

from __future__ import annotations

import io
import json
import logging
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import AddRequest
from pipeline.features.chat import ChatEvent
from pipeline.features.erase import UserErased
from pipeline.features.reprocess import ReprocessRun
from pipeline.ingestion.intake import Accepted
from pipeline.logs import ContextFilter, JsonLineFormatter
from pipeline.store.indices import IndexNames
from tests.integration.test_api import Tenant, temporary_tenant, wait_until
from tests.processes import ApiProcess, WorkerProcess

pytestmark = pytest.mark.integration

ISO_WITH_OFFSET = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d")
ADMIN_KEY = "admin-key-of-the-request-id-tests"


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a process's log (a worker's also has Celery's banner, in text)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def lines_of(path: Path, request_id: str) -> list[dict[str, Any]]:
    return [line for line in json_lines(path) if line.get("request_id") == request_id]


def assert_clean(path: Path) -> None:
    """Every JSON line has an ISO 8601 time with its offset; no colour code anywhere."""
    text = path.read_text()
    assert "\x1b[" not in text and "\\u001b" not in text, path
    for line in json_lines(path):
        assert ISO_WITH_OFFSET.fullmatch(line["time"]), line


@pytest.fixture(scope="module")
def tenant(api_url: str) -> Iterator[Tenant]:
    with temporary_tenant(api_url, "reqid") as created:
        yield created


def test_the_request_id_reaches_the_job_record_and_the_logs_of_the_api_and_the_worker(
    tenant: Tenant, api_process: ApiProcess, worker: WorkerProcess
) -> None:
    request_id = f"trace-{uuid.uuid4().hex}"
    body = {"messages": f"I collect stamps {request_id}", "user_id": "rid-user", "infer": False}

    added = tenant.http.post("/v1/memories", json=body, headers={"X-Request-ID": request_id})

    assert added.status_code == 202, added.text
    assert added.headers["X-Request-ID"] == request_id
    job_id = added.json()["job_id"]
    job = wait_until(
        lambda: (j := tenant.http.get(f"/v1/jobs/{job_id}").json())["status"] == "succeeded" and j,
        "the job to succeed",
    )
    assert job["request_id"] == request_id
    # the same conversation again is the same job, still naming the request that queued it
    again = tenant.http.post("/v1/memories", json=body, headers={"X-Request-ID": "second"})
    assert (again.json()["job_id"], again.json()["created"]) == (job_id, False)
    assert again.headers["X-Request-ID"] == "second"
    assert tenant.http.get(f"/v1/jobs/{job_id}").json()["request_id"] == request_id

    api_lines = wait_until(
        lambda: (found := lines_of(api_process.log_path, request_id)) and len(found) >= 2 and found,
        "the API's lines of the request",
    )
    assert {line["logger"] for line in api_lines} >= {"memq.api", "uvicorn.access"}
    assert any(line.get("job_id") == job_id for line in api_lines), api_lines
    worker_lines = wait_until(
        lambda: lines_of(worker.log_path, request_id), "the worker's lines of the job"
    )
    assert all(line["job_id"] == job_id for line in worker_lines), worker_lines
    assert any(line["message"] == f"job {job_id} succeeded" for line in worker_lines)
    assert_clean(api_process.log_path)
    assert_clean(worker.log_path)


class KeptIntake:
    """An intake that answers each submit with a queued record naming the request id it was
    handed, and keeps those ids; a ``broken`` one fails as a bug would."""

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken
        self.request_ids: list[str | None] = []

    def submit(
        self,
        request: AddRequest,
        idempotency_key: str | None = None,
        batch_id: str | None = None,
        backfill: bool = False,
        request_id: str | None = None,
    ) -> Accepted:
        if self.broken:
            raise RuntimeError("a bug in the intake")
        self.request_ids.append(request_id)
        now = datetime.now(UTC)
        record = JobRecord(
            job_id=request.job_id(),
            tenant=request.scope.tenant,
            status=JobStatus.QUEUED,
            request_id=request_id,
            created_at=now,
            updated_at=now,
        )
        return Accepted(record, created=True)

    def replay(self, job_id: str) -> JobRecord:
        raise NotImplementedError  # not reached by these tests

    def accept_chat(self, event: ChatEvent) -> bool:
        raise NotImplementedError

    def held_job(self, job_id: str) -> JobRecord | None:
        return None

    def erase_user(self, tenant: str, user_id: str) -> UserErased:
        raise NotImplementedError

    def start_reprocess(self, run: ReprocessRun) -> str:
        raise NotImplementedError

    def active_reprocess(self) -> str | None:
        return None


CONVERSATION = {"messages": "I like tea", "user_id": "u1", "infer": False}


@pytest.fixture
def in_process(settings: Settings, indices: IndexNames) -> Settings:
    """The test settings with an admin key of their own and no write limit."""
    api = settings.api.model_copy(update={"admin_key": SecretStr(ADMIN_KEY), "rate_write_per_s": 0})
    return settings.model_copy(update={"api": api})


def client_over(settings: Settings, intake: KeptIntake) -> TestClient:
    return TestClient(
        create_app(settings, intake),
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        raise_server_exceptions=False,
    )


@pytest.fixture
def api_lines() -> Iterator[io.StringIO]:
    """What the API's logger writes, through the handler ``configure_logging`` installs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonLineFormatter("api"))
    logger = logging.getLogger("memq.api")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


def test_the_intake_is_handed_the_request_id(in_process: Settings) -> None:
    intake = KeptIntake()
    with client_over(in_process, intake) as client:
        added = client.post("/v1/memories", json=CONVERSATION, headers={"X-Request-ID": "add-1"})
        batch = client.post(
            "/v1/batches", json={"items": [CONVERSATION]}, headers={"X-Request-ID": "batch-1"}
        )
        generated = client.post("/v1/memories", json=CONVERSATION)

    for answer in (added, batch, generated):
        assert answer.status_code == 202, answer.text
    assert intake.request_ids == ["add-1", "batch-1", generated.headers["X-Request-ID"]]


def test_a_500_names_the_request_id_in_its_answer_and_its_log_line(
    in_process: Settings, api_lines: io.StringIO
) -> None:
    with client_over(in_process, KeptIntake(broken=True)) as client:
        answer = client.post("/v1/memories", json=CONVERSATION, headers={"X-Request-ID": "bug-1"})

    assert answer.status_code == 500
    assert answer.headers.get_list("X-Request-ID") == ["bug-1"]
    body = answer.json()
    assert body["error"]["type"] == "internal"
    assert body["error"]["request_id"] == "bug-1"
    assert "request id bug-1" in body["error"]["message"]
    assert body["detail"] == body["error"]["message"]
    assert "a bug in the intake" not in answer.text  # the details stay in the log
    lines = [json.loads(line) for line in api_lines.getvalue().splitlines()]
    (logged,) = [line for line in lines if line["level"] == "ERROR"]
    assert logged["request_id"] == "bug-1"
    assert "a bug in the intake" in logged["exc_info"]


def test_the_sdk_reads_the_request_id_of_a_job(tenant: Tenant, api_url: str) -> None:
    from memq import Client

    with Client(api_url, tenant.key) as client:
        job = client.add("I grow tomatoes", user_id="rid-sdk", infer=False, wait=True)

    assert job.request_id is not None and re.fullmatch(r"[0-9a-f]{32}", job.request_id), job
    answer = httpx.get(f"{api_url}/v1/jobs/{job.job_id}", headers=tenant.http.headers)
    assert answer.json()["request_id"] == job.request_id
