"""A memq job that fails does not look green in Flower: its failure is reported as a Celery
task (``memq.job.failed``) that fails with the job's reason, seen in the result backend and
in the stack's Flower (a real worker, a job failed by the
scripted model)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from pipeline.config import Settings
from tests.conftest import admin_key
from tests.fakellm import Fail, FakeLLMServer
from tests.integration.test_services import flower_login
from tests.processes import WorkerProcess
from workers.runtime import MemqCelery
from workers.tasks import JobFailedError, failure_report_id

pytestmark = pytest.mark.integration


def tenant_client(api_url: str) -> httpx.Client:
    created = httpx.post(
        f"{api_url}/v1/admin/keys",
        json={"tenant": f"report-{uuid.uuid4().hex[:8]}"},
        headers={"Authorization": f"Bearer {admin_key()}"},
        timeout=30,
    )
    created.raise_for_status()
    key = created.json()["key"]
    return httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def add(client: httpx.Client, text: str, infer: bool) -> dict[str, Any]:
    body = {"messages": text, "user_id": "flo", "infer": infer}
    answer = client.post("/v1/memories", params={"wait": "true"}, json=body)
    assert answer.status_code == 200, answer.text
    job: dict[str, Any] = answer.json()
    return job


def flower_task(settings: Settings, task_id: str) -> dict[str, Any]:
    """The stack's Flower's view of a task, once its events have reached it."""
    base = f"http://{settings.flower.host}:{settings.flower.port}"
    deadline = time.monotonic() + 30
    while True:
        answer = httpx.get(f"{base}/api/task/info/{task_id}", auth=flower_login(settings))
        if answer.status_code == 200 and answer.json().get("state") == "FAILURE":
            shown: dict[str, Any] = answer.json()
            return shown
        assert time.monotonic() < deadline, f"Flower does not show {task_id}: {answer.text}"
        time.sleep(0.5)


def test_a_failed_job_is_a_failed_task_with_its_reason(
    api_url: str,
    worker: WorkerProcess,
    celery_app: MemqCelery,
    fake_llm: FakeLLMServer,
    stack_settings: Settings,
) -> None:
    with tenant_client(api_url) as client:
        fake_llm.script_chat(Fail(400, "the model refused this conversation"))
        failed = add(client, "A conversation the model refuses.", infer=True)
        fine = add(client, "A note kept verbatim.", infer=False)
    assert failed["status"] == "failed", failed
    assert fine["status"] == "succeeded", fine

    report = celery_app.AsyncResult(failure_report_id(failed["job_id"], failed["attempts"]))
    deadline = time.monotonic() + 30
    while report.state != "FAILURE":
        assert time.monotonic() < deadline, f"no failure reported: {report.state}"
        time.sleep(0.2)
    assert isinstance(report.result, JobFailedError)
    message = str(report.result)
    assert failed["job_id"] in message and "failed in phase extract" in message
    assert "the model refused this conversation" in message

    shown = flower_task(stack_settings, report.id)
    assert shown["state"] == "FAILURE" and shown["name"] == "memq.job.failed", shown
    assert "the model refused this conversation" in shown["exception"]

    unreported = celery_app.AsyncResult(failure_report_id(fine["job_id"], fine["attempts"]))
    assert unreported.state == "PENDING"  # a job that succeeded reports nothing
