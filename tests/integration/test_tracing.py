"""OpenTelemetry traces from a real API process and a real worker process, exported over
OTLP/HTTP to a receiver the test runs (``tests/otlp.py``): one job is one trace, from the API
request through the worker's tasks to Elasticsearch. Both processes get a private index prefix
and private queues, so the session's own (untraced) worker never takes this job."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from elasticsearch import Elasticsearch

from memq import Client
from memq.types import Job
from pipeline.config import Settings
from pipeline.domain.state import Phase
from pipeline.store.indices import drop_indices, ensure_indices
from tests.conftest import admin_key, running
from tests.fakellm import FakeLLMServer
from tests.integration.test_request_ids import lines_of
from tests.integration.test_sdk import eventually
from tests.otlp import OtlpReceiver, ReceivedSpan
from tests.processes import ApiProcess, WorkerProcess, free_port
from workers.names import phase_task_name

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as otlp:
        yield otlp


@pytest.fixture
def traced_env(
    test_env: dict[str, str], receiver: OtlpReceiver, stack_settings: Settings, es: Elasticsearch
) -> Iterator[dict[str, str]]:
    run = uuid.uuid4().hex[:8]
    prefix = f"memqtest-otel-{run}"
    env = {
        **test_env,
        "MEMQ_ES_INDEX_PREFIX": prefix,
        "MEMQ_QUEUES_IO": f"otel-{run}.io",
        "MEMQ_QUEUES_CPU": f"otel-{run}.cpu",
        "MEMQ_QUEUES_BACKFILL": f"otel-{run}.backfill",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "200",  # export within a moment, not every 5 s
    }
    yield env
    config = stack_settings.es.model_copy(update={"index_prefix": prefix})
    drop_indices(es, ensure_indices(es, config, stack_settings.embedder.dims))


def worker_ready(env: dict[str, str], worker: WorkerProcess) -> None:
    """``memq health`` round-trips a task through the worker (as ops/ checks it)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        worker.check_alive()
        done = subprocess.run(
            [sys.executable, "-m", "memq.cli", "health", "--queue", "io", "--timeout-s", "5"],
            env=env,
            capture_output=True,
            check=False,
            timeout=60,
        )
        if done.returncode == 0:
            return
    raise RuntimeError(f"traced worker not ready: {worker.tail()}")


def elasticsearch_span(span: ReceivedSpan) -> bool:
    return span.attributes.get("db.system.name") == "elasticsearch"


def test_one_job_is_one_trace_from_the_api_through_the_tasks_to_elasticsearch(
    traced_env: dict[str, str],
    receiver: OtlpReceiver,
    fake_llm: FakeLLMServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    logs = tmp_path_factory.mktemp("traced")
    worker = WorkerProcess(traced_env, logs / "worker.log")
    api_env = {**traced_env, "MEMQ_API_PORT": str(free_port()), "MEMQ_API_ADMIN_KEY": admin_key()}
    api = ApiProcess(api_env, logs / "api.log")
    fact = {"text": "The user sails on weekends", "attributed_to": "user", "related": []}
    fake_llm.script_chat(json.dumps({"memory": [fact]}))

    with (
        running(worker, lambda: worker_ready(traced_env, worker)),
        running(api, api.wait_ready),
        Client(api.url, admin_key()) as admin,
    ):
        key = admin.create_key(f"otel-{uuid.uuid4().hex[:6]}")
        with Client(api.url, key.key) as client:
            job = client.add("I sail on weekends", user_id="sailor", wait=True)
        assert isinstance(job, Job) and job.status == "succeeded", job

        def traced() -> list[ReceivedSpan] | None:
            spans = receiver.spans
            posts = [s for s in spans if s.service == "memq-api" and "/v1/memories" in s.name]
            for post in posts:
                trace = [s for s in spans if s.trace_id == post.trace_id]
                if complete(trace):
                    return trace
            return None

        trace = eventually(traced, "one trace spanning the API, the tasks and Elasticsearch", 60)

    tasks = {s.name.removeprefix("run/") for s in trace if s.name.startswith("run/")}
    assert {phase_task_name(Phase.EXTRACT), phase_task_name(Phase.PERSIST)} <= tasks, tasks
    roots = [s for s in trace if not s.parent_id]
    assert [r.service for r in roots] == ["memq-api"], roots  # one root: the API request
    # the trace leads to the log lines: the API's of the request, the worker's of the job
    assert job.request_id is not None
    api_lines = [line for line in lines_of(api.log_path, job.request_id) if "trace_id" in line]
    assert {line["trace_id"] for line in api_lines} == {roots[0].trace_id}, api_lines
    succeeded = [
        line
        for line in lines_of(worker.log_path, job.request_id)
        if line["message"] == f"job {job.job_id} succeeded"
    ]
    assert [line["trace_id"] for line in succeeded] == [roots[0].trace_id], succeeded


def complete(trace: list[ReceivedSpan]) -> bool:
    """The worker's extract and persist tasks are in this trace, they reached Elasticsearch,
    and every span's parent has arrived (spans are exported in batches, each task's when its
    process flushes, parents often after children)."""
    worker_spans = [s for s in trace if s.service == "memq-worker"]
    ids = {s.span_id for s in trace}
    tasks = {s.name.removeprefix("run/") for s in worker_spans if s.name.startswith("run/")}
    return (
        {phase_task_name(Phase.EXTRACT), phase_task_name(Phase.PERSIST)} <= tasks
        and any(elasticsearch_span(s) for s in worker_spans)
        and all(not s.parent_id or s.parent_id in ids for s in trace)
    )
