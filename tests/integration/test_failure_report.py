"""A memq job that fails does not look green in Flower: its failure is reported as a Celery
task (``memq.job.failed``) that fails with the job's reason, seen in the result backend and
in the stack's Flower (a real worker, a job failed by the
scripted model)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from pipeline.config import Settings
from tests.fakellm import Fail, FakeLLMServer
from tests.integration.test_job_listing import add, new_tenant
from tests.integration.test_services import flower_login
from tests.processes import WorkerProcess
from workers.failures import JobFailedError, failure_report_id
from workers.runtime import MemqCelery

pytestmark = pytest.mark.integration


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
    with new_tenant(api_url) as client:
        fake_llm.script_chat(Fail(400, "the model refused this conversation"))
        failed = add(client, "flo", "A conversation the model refuses.", infer=True)
        fine = add(client, "flo", "A note kept verbatim.")
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
