"""With no LLM configured, an add that needs one (extraction, a procedural summary) is refused
at the intake with a 4xx saying what to set, on every surface: REST, batches, the mem0 route,
the SDK, the mem0 client, MCP and ``memq backfill``. An add that needs none (infer=false) is
accepted and stored. A chat-platform burst, which asks for extraction by default only, is
stored verbatim by a worker without an LLM.

The API process here has no LLM in the way compose leaves it unset: no ``MEMQ_LLM_*`` of the
test environment, and ``OPENAI_API_KEY``, ``MEMQ_LLM_API_KEY`` and ``MEMQ_LLM_BASE_URL`` set
to the empty string. Its jobs run on the test worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from mcp import Client as McpClient
from pydantic import SecretStr

import memq
from api.app import create_app
from pipeline.config import LLMConfig, QueueConfig, Settings
from pipeline.domain.jobs import JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.store.indices import IndexNames
from tests.conftest import admin_key, api_running, running
from tests.fakellm import Fail, FakeLLMServer
from tests.integration.test_api import (
    Tenant,
    create_tenant,
    http_client,
    remember,
    wait_listed,
    wait_until,
)
from tests.integration.test_mcp import keyed_transport, payload, text_of
from tests.integration.test_mem0_client import import_mem0
from tests.integration.test_webhooks import GENERIC, generic_post, jobs_of
from tests.processes import ApiProcess, WorkerProcess, free_port
from workers.app import MemqCelery, create_celery
from workers.intake import submit
from workers.serving import CeleryIntake

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SAYS = ("needs an LLM", "OPENAI_API_KEY", "MEMQ_LLM_BASE_URL")


@pytest.fixture(scope="module")
def no_llm_env(test_env: dict[str, str]) -> dict[str, str]:
    """The test environment without an LLM: blank variables, as compose passes unset ones."""
    kept = {
        k: v for k, v in test_env.items() if not k.startswith("MEMQ_LLM_") and k != "OPENAI_API_KEY"
    }
    return {**kept, "OPENAI_API_KEY": "", "MEMQ_LLM_API_KEY": "", "MEMQ_LLM_BASE_URL": ""}


@pytest.fixture(scope="module")
def no_llm_api(
    no_llm_env: dict[str, str], worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiProcess]:
    """The API without an LLM; the test worker runs the jobs it accepts."""
    with api_running(no_llm_env, tmp_path_factory.mktemp("api-no-llm")) as process:
        yield process


@pytest.fixture(scope="module")
def tenant(no_llm_api: ApiProcess) -> Iterator[Tenant]:
    with http_client(no_llm_api.url, admin_key()) as admin:
        made = create_tenant(admin, no_llm_api.url, "nollm")
        yield made
        made.http.close()
        admin.delete(f"/v1/admin/keys/{made.key_id}")


@pytest.fixture
def uid() -> str:
    return f"user-{uuid.uuid4().hex[:12]}"


def assert_needs_an_llm(response: httpx.Response, field: str = "infer") -> dict[str, Any]:
    """422 whose message says an LLM is needed, what to set, and how to do without."""
    assert response.status_code == 422, response.text
    body: dict[str, Any] = response.json()
    message = body["error"]["message"]
    assert all(word in message for word in SAYS), body
    assert "infer=false" in message, body
    assert body["error"]["field"] == field, body
    assert body["detail"] == message, body
    return body


def assert_nothing_queued(tenant: Tenant, user_id: str) -> None:
    """Jobs of a user run in acceptance order: once an infer=false add posted after the
    refused ones has finished, the user's memories are that add's alone."""
    sentinel = remember(tenant, user_id, f"sentinel {uuid.uuid4().hex}")
    assert [m["id"] for m in wait_listed(tenant, user_id, 1)] == [sentinel["id"]]


def test_an_infer_add_is_refused_and_an_infer_false_add_is_stored(tenant: Tenant, uid: str) -> None:
    body = {"messages": "I moved to Lisbon", "user_id": uid}
    assert_needs_an_llm(tenant.http.post("/v1/memories", json=body))
    assert_needs_an_llm(tenant.http.post("/v1/memories", json={**body, "infer": True}))
    assert_needs_an_llm(tenant.http.post("/v1/memories", params={"wait": "true"}, json=body))
    stored = remember(tenant, uid, "I moved to Lisbon")
    assert stored["memory"] == "I moved to Lisbon"
    assert [m["id"] for m in wait_listed(tenant, uid, 1)] == [stored["id"]]


def test_a_procedural_add_is_refused_whatever_infer_says(tenant: Tenant, uid: str) -> None:
    body = {
        "messages": [{"role": "assistant", "content": "Step 1: open the page"}],
        "agent_id": f"agent-{uid}",
        "memory_type": "procedural_memory",
        "infer": False,
    }
    assert_needs_an_llm(tenant.http.post("/v1/memories", json=body), field="memory_type")


def test_a_batch_with_one_item_needing_an_llm_queues_nothing(tenant: Tenant, uid: str) -> None:
    items = [
        {"messages": "fine as it is", "user_id": uid, "infer": False},
        {"messages": "needs extraction", "user_id": uid},
    ]
    response = tenant.http.post("/v1/batches", json={"items": items})
    body = assert_needs_an_llm(response, field="items.1.infer")
    assert body["error"]["message"].startswith("items.1: "), body
    assert_nothing_queued(tenant, uid)


@pytest.fixture(scope="module")
def mem0(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as patch:
        yield import_mem0(patch, str(tmp_path_factory.mktemp("mem0")))


def test_the_mem0_add_route_refuses_and_its_client_raises_the_reason(
    tenant: Tenant, uid: str, no_llm_api: ApiProcess, mem0: Any
) -> None:
    body = {"messages": [{"role": "user", "content": "I like tea"}], "user_id": uid}
    assert_needs_an_llm(tenant.http.post("/v3/memories/add/", json=body))
    assert_needs_an_llm(tenant.http.post("/v3/memories/add/", json={**body, "async_mode": True}))
    with httpx.Client(timeout=60) as http:
        client = mem0.MemoryClient(api_key=tenant.key, host=no_llm_api.url, client=http)
        with pytest.raises(Exception, match="needs an LLM") as raised:
            client.add([{"role": "user", "content": "I like coffee"}], user_id=uid)
        assert "OPENAI_API_KEY" in str(raised.value)
        stored = client.add(
            [{"role": "user", "content": "I like coffee"}], user_id=uid, infer=False
        )
    assert [r["memory"] for r in stored["results"]] == ["I like coffee"]


def test_the_sdk_raises_a_validation_error_saying_what_to_set(
    tenant: Tenant, uid: str, no_llm_api: ApiProcess
) -> None:
    with memq.Client(no_llm_api.url, tenant.key) as sdk:
        with pytest.raises(memq.ValidationError) as raised:
            sdk.add("I collect stamps", user_id=uid)
        assert raised.value.status == 422 and raised.value.field == "infer"
        assert all(word in str(raised.value) for word in SAYS), str(raised.value)
        accepted = sdk.add("I collect stamps", user_id=uid, infer=False)
        assert sdk.wait_for(accepted.job_id).status == JobStatus.SUCCEEDED


def test_mcp_add_memory_is_a_tool_error_saying_what_to_set(
    tenant: Tenant, uid: str, no_llm_api: ApiProcess
) -> None:
    async def body() -> None:
        async with McpClient(keyed_transport(f"{no_llm_api.url}/mcp", tenant.key)) as client:
            refused = await client.call_tool(
                "add_memory", {"messages": "I play the cello", "user_id": uid}
            )
            assert refused.is_error, text_of(refused)
            assert all(word in text_of(refused) for word in SAYS), text_of(refused)
            stored = payload(
                await client.call_tool(
                    "add_memory",
                    {"messages": "I play the cello", "user_id": uid, "infer": False, "wait_s": 60},
                )
            )
            assert stored["status"] == JobStatus.SUCCEEDED, stored

    anyio.run(body)


def test_backfill_asked_to_infer_stops_before_it_starts(
    no_llm_env: dict[str, str], tmp_path: Path
) -> None:
    archive = tmp_path / "archive.jsonl"
    row = {
        "id": "s1",
        "user_id": f"bf-{uuid.uuid4().hex[:8]}",
        "timestamp": "2024-01-01T00:00:00+00:00",
        "messages": [{"role": "user", "content": "I planted tomatoes"}],
    }
    archive.write_text(json.dumps(row) + "\n")
    checkpoint = tmp_path / "checkpoint.json"
    command = [
        *(sys.executable, "-m", "memq.cli", "backfill", str(archive)),
        *("--format=memq-jsonl", "--infer", f"--checkpoint={checkpoint}"),
    ]
    done = subprocess.run(
        command, env=no_llm_env, cwd=REPO, capture_output=True, timeout=120, check=False
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert "this backfill needs an LLM" in stderr and "--no-infer" in stderr, stderr
    assert all(word in stderr for word in SAYS[1:]), stderr
    assert not checkpoint.exists(), "nothing was started"


@pytest.fixture(scope="module")
def chat_without_llm(
    no_llm_env: dict[str, str],
    settings: Settings,
    indices: IndexNames,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TestClient, Any]]:
    """The API app (in process) with the generic webhook on, and a worker of its own without an
    LLM on queues of their own: the flush of a chat burst runs with no LLM."""
    suffix = uuid.uuid4().hex[:8]
    queues = QueueConfig(
        io=f"nollm-{suffix}.io", cpu=f"nollm-{suffix}.cpu", backfill=f"nollm-{suffix}.bf"
    )
    chat = settings.chat.model_copy(update={"webhook_secret": SecretStr(GENERIC)})
    llmless = settings.model_copy(
        update={"llm": LLMConfig(), "openai_api_key": None, "queues": queues, "chat": chat}
    )
    env = {
        **no_llm_env,
        "MEMQ_QUEUES_IO": queues.io,
        "MEMQ_QUEUES_CPU": queues.cpu,
        "MEMQ_QUEUES_BACKFILL": queues.backfill,
        "MEMQ_WORKER_METRICS_PORT": str(free_port()),
    }
    app = create_celery(llmless)
    worker = WorkerProcess(env, tmp_path_factory.mktemp("worker-no-llm") / "worker.log", 1)
    with (
        running(worker, lambda: worker.wait_ready(app)),
        TestClient(create_app(llmless, CeleryIntake(app))) as client,
    ):
        yield client, app.runtime.store
    app.close()


def test_a_chat_burst_without_an_llm_is_stored_as_it_was_said(
    chat_without_llm: tuple[TestClient, Any], uid: str
) -> None:
    client, store = chat_without_llm
    said = ["we moved the standup to 10:30", "and the retro to Friday"]
    for text in said:
        event = {
            "event_id": uuid.uuid4().hex,
            "conversation_id": f"c-{uid}",
            "user_id": uid,
            "content": text,
        }
        answer = generic_post(client, event)
        assert answer.status_code == 200 and answer.json()["accepted"], answer.text
    jobs = jobs_of(store, uid)
    assert len(jobs) == 1, jobs
    job = jobs[0]
    assert job["request"]["infer"] is False, job["request"]
    assert sorted(r["text"] for r in job["results"]) == sorted(said), job["results"]


def test_a_failed_job_that_needs_an_llm_is_not_replayed_without_one(
    tenant: Tenant, uid: str, celery_app: MemqCelery, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script_chat(Fail(400, "the model refused this conversation"))
    said = MessageIn.model_validate({"role": "user", "content": "I drink green tea."})
    request = AddRequest(scope=Scope(tenant=tenant.name, user_id=uid), messages=[said])
    job_id = submit(celery_app, request).record.job_id  # accepted where an LLM was configured
    failed = wait_until(
        lambda: (r := tenant.http.get(f"/v1/jobs/{job_id}").json())["status"] == "failed" and r,
        f"job {job_id} to fail",
    )
    assert "refused" in failed["reason"]
    assert_needs_an_llm(tenant.http.post(f"/v1/jobs/{job_id}/retry"))
