"""Job webhooks out of the batch, on the real Redis and Elasticsearch and a real worker: a
tenant whose receiver answers slowly holds no batch, no session and no other tenant's
notification; only its own delivery waits, up to the deadline."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from pipeline.config import QueueConfig, Settings
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.store.indices import IndexNames
from tests.conftest import running
from tests.integration.test_webhook_guard import Receiver, Trickler, finished
from tests.processes import WorkerProcess, free_port
from workers.app import MemqCelery, create_celery
from workers.intake import submit

pytestmark = pytest.mark.integration

DEADLINE_S = 15  # MEMQ_WEBHOOK_TIMEOUT_S: long enough that a wait on it cannot hide, and
# shorter than the tests' soft task limit (20 s)


@pytest.fixture(scope="module")
def hooked(
    test_env: dict[str, str],
    settings: Settings,
    indices: IndexNames,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[MemqCelery]:
    """A worker of its own, on queues of its own, that may call receivers on loopback."""
    suffix = uuid.uuid4().hex[:8]
    queues = QueueConfig(
        io=f"hooks-{suffix}.io", cpu=f"hooks-{suffix}.cpu", backfill=f"hooks-{suffix}.bf"
    )
    env = {
        **test_env,
        "MEMQ_QUEUES_IO": queues.io,
        "MEMQ_QUEUES_CPU": queues.cpu,
        "MEMQ_QUEUES_BACKFILL": queues.backfill,
        "MEMQ_WORKER_METRICS_PORT": str(free_port()),
        "MEMQ_WEBHOOK_ALLOW": "127.0.0.0/8",
        "MEMQ_WEBHOOK_TIMEOUT_S": str(DEADLINE_S),
    }
    app = create_celery(settings.model_copy(update={"queues": queues}))
    worker = WorkerProcess(env, tmp_path_factory.mktemp("worker-hooks") / "worker.log")
    with running(worker, lambda: worker.wait_ready(app)):
        yield app
    app.close()


def job(app: MemqCelery, tenant: str, user: str, text: str, url: str) -> str:
    said = MessageIn.model_validate({"role": "user", "content": text})
    request = AddRequest(
        scope=Scope(tenant=tenant, user_id=user), messages=[said], infer=False, webhook_url=url
    )
    return submit(app, request).record.job_id


def delivered(receiver: Receiver, job_id: str, timeout_s: float) -> float:
    """When ``receiver`` got ``job_id``'s delivery (monotonic time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(json.loads(r["body"])["job_id"] == job_id for r in receiver.requests):
            return time.monotonic()
        time.sleep(0.1)
    raise AssertionError(f"no delivery of {job_id} within {timeout_s} s")


def with_errors(app: MemqCelery, job_id: str, timeout_s: float) -> JobRecord:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = app.runtime.store.get_job(job_id)
        if record is not None and record.errors:
            return record
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} recorded no webhook failure within {timeout_s} s")


def test_a_slow_receiver_delays_only_its_own_tenants_notification(hooked: MemqCelery) -> None:
    tag = uuid.uuid4().hex[:8]
    slow, fast = Trickler(), Receiver()
    with fast:
        try:
            started = time.monotonic()
            slow_url = f"http://127.0.0.1:{slow.port}/hook"
            fast_url = f"http://127.0.0.1:{fast.port}/hook"
            first = job(hooked, f"slow-{tag}", "u1", "I keep bees.", slow_url)
            other = job(hooked, f"fast-{tag}", "u1", "I grow tomatoes.", fast_url)
            second = job(hooked, f"slow-{tag}", "u1", "The hives are on the roof.", slow_url)
            assert delivered(fast, other, DEADLINE_S) - started < DEADLINE_S * 2 / 3
            assert finished(hooked, first).status is JobStatus.SUCCEEDED
            # the session goes on while its first job's receiver is still answering
            assert finished(hooked, second, DEADLINE_S * 2 / 3).status is JobStatus.SUCCEEDED
            assert time.monotonic() - started < DEADLINE_S * 2 / 3
            reasons = [e["reason"] for e in with_errors(hooked, first, DEADLINE_S * 2).errors]
            assert reasons == [f"webhook not delivered: no whole HTTP answer within {DEADLINE_S} s"]
        finally:
            slow.close()
