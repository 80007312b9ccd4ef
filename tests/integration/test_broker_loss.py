"""Workers ride out the loss of their broker, under the supervision ops/ runs them with: a
PRIVATE redis-server started by this test is stopped and started again mid-ingestion (jobs
running, others waiting their turn in their session), and a worker is SIGKILLed; the
supervisor brings it back and every accepted job finishes, each memory stored once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from pipeline.config import RedisConfig, Settings
from pipeline.domain.jobs import TERMINAL_STATUSES, JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.errors import TransientError
from pipeline.store.indices import IndexNames, drop_indices, ensure_indices
from tests.conftest import running
from tests.fakellm import FakeLLMServer
from tests.integration.test_node_loss import settings_of
from tests.integration.test_pipeline import facts_from_conversation
from tests.integration.test_worker_loss import RoleWorker
from tests.private_services import PrivateRedis
from workers.app import HEALTH_TASK, MemqCelery, create_celery
from workers.intake import submit

pytestmark = pytest.mark.integration

OPS = Path(__file__).resolve().parents[2] / "ops"
TERMINAL = TERMINAL_STATUSES


class Supervised:
    """``ops/supervise`` running a ``memq worker`` (its own process group)."""

    def __init__(self, env: dict[str, str], state_dir: Path) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = state_dir / "worker.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    str(OPS / "supervise"),
                    "worker",
                    sys.executable,
                    "-m",
                    "memq.cli",
                    "worker",
                    "--concurrency=2",
                    "--hostname=memqsupervised@%h",
                ],
                env={**env, "MEMQ_OPS_STATE_DIR": str(state_dir)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def restarts(self) -> int:
        """The supervisor's restart count (0 while it is rewriting the file)."""
        fields = (self.state_dir / "run" / "worker.restarts").read_text().split()
        return int(fields[0]) if fields else 0

    def worker_pid(self) -> int:
        children = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert children, f"the supervisor runs no worker: {self.tail()}"
        return int(children[0])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)

    def tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path, ports=(6400, 6500))
    server.start()
    yield server
    server.stop()


def answers(app: MemqCelery, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            app.send_task(HEALTH_TASK).get(timeout=3)
            return True
        except Exception:  # not consuming (yet)
            time.sleep(0.5)
    return False


def conversation(i: int, session: str | None = None) -> AddRequest:
    return AddRequest(
        scope=Scope(user_id=session or f"broker-{uuid.uuid4().hex[:8]}"),
        messages=[MessageIn.model_validate({"role": "user", "content": f"I own {i} bikes."})],
        infer=False,
    )


def test_workers_ride_out_a_broker_restart_and_a_kill(
    broker: PrivateRedis,
    settings: Settings,
    test_env: dict[str, str],
    indices: IndexNames,
    tmp_path: Path,
) -> None:
    private = settings.model_copy(update={"redis": RedisConfig(url=broker.url)})
    app = create_celery(private)
    worker = Supervised({**test_env, "MEMQ_REDIS_URL": broker.url}, tmp_path / "ops")
    try:
        assert answers(app, 90), worker.tail()
        sessions = [f"broker-{uuid.uuid4().hex[:8]}" for _ in range(6)]
        jobs = [  # ten each: the broker stops while most are still to run
            submit(app, conversation(i, sessions[i % len(sessions)])).record.job_id
            for i in range(60)
        ]
        before = wait_terminal(app, jobs, 120, until_any=True)
        broker.stop()  # mid-ingestion: some jobs ended, others running or waiting their turn
        assert any(s not in TERMINAL for s in before.values()), before
        time.sleep(5)
        broker.start()
        jobs += submit_when_possible(app, range(60, 70))
        assert answers(app, 60), worker.tail()

        statuses = wait_terminal(app, jobs, 240)
        assert set(statuses.values()) == {JobStatus.SUCCEEDED}, unsucceeded(app, statuses)
        for session in sessions:  # ten jobs each, one memory each: none lost, none twice
            assert memory_count(app, session) == 10
        assert worker.restarts() == 0, worker.tail()  # the outage was ridden out, not restarted

        os.kill(worker.worker_pid(), signal.SIGKILL)  # a crash no reconnect can ride out
        deadline = time.monotonic() + 30
        while worker.restarts() < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert worker.restarts() >= 1, worker.tail()
        later = [submit(app, conversation(i)).record.job_id for i in range(20, 25)]
        statuses = wait_terminal(app, later, 120)
        assert set(statuses.values()) == {JobStatus.SUCCEEDED}, unsucceeded(app, statuses)
        assert worker.process.poll() is None  # the supervisor itself never gave up
    finally:
        worker.stop()
        app.close()


def submit_when_possible(app: MemqCelery, numbers: range) -> list[str]:
    """Submit each conversation, waiting out the moments the broker is still coming back."""
    jobs = []
    for i in numbers:
        deadline = time.monotonic() + 30
        while True:
            try:
                jobs.append(submit(app, conversation(i)).record.job_id)
                break
            except TransientError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    return jobs


def wait_terminal(
    app: MemqCelery, jobs: list[str], timeout_s: float, until_any: bool = False
) -> dict[str, str]:
    """The jobs' statuses once all are terminal (``until_any``: once one has succeeded)."""
    deadline = time.monotonic() + timeout_s
    statuses: dict[str, str] = {}
    while time.monotonic() < deadline:
        records = [app.runtime.store.get_job(job) for job in jobs]
        statuses = {job: r.status if r else "missing" for job, r in zip(jobs, records, strict=True)}
        if until_any and JobStatus.SUCCEEDED in statuses.values():
            return statuses
        if all(s in TERMINAL for s in statuses.values()):
            return statuses
        time.sleep(0.05 if until_any else 1)  # until_any: catch the first end
    return statuses


def unsucceeded(app: MemqCelery, statuses: dict[str, str]) -> dict[str, Any]:
    """What the jobs that did not succeed say of themselves: status, phase, reason, errors."""
    said: dict[str, Any] = {}
    for job, status in statuses.items():
        if status == JobStatus.SUCCEEDED:
            continue
        record = app.runtime.store.get_job(job)
        said[job] = (
            status
            if record is None
            else record.model_dump(include={"status", "phase", "attempts", "reason", "errors"})
        )
    return said


def memory_count(app: MemqCelery, user_id: str) -> int:
    """Memories of the user, each distinct text counted once per copy."""
    es, index = app.runtime.es, app.runtime.store.names.memories
    es.indices.refresh(index=index)
    hits = es.search(index=index, query={"term": {"user_id": user_id}}, size=100)["hits"]["hits"]
    texts = [h["_source"]["text"] for h in hits]
    assert len(set(texts)) == len(texts), texts  # nothing stored twice
    return len(texts)


HELD = "held-through-the-outage"
RELEASE = threading.Event()  # the held extraction answers once the test has stopped the broker


def held_responder(request: dict[str, Any]) -> str:
    """Facts of the conversation; the marked one's call is held until the broker is down."""
    if HELD in request["messages"][-1]["content"]:
        RELEASE.wait(timeout=120)
    return facts_from_conversation(request)


@dataclass
class RoleStack:
    app: MemqCelery
    broker: PrivateRedis
    io: RoleWorker
    cpu: RoleWorker
    settings: Settings

    def pids(self) -> tuple[int, int]:
        assert self.io.process is not None and self.cpu.process is not None
        return self.io.process.pid, self.cpu.process.pid

    def check_alive(self) -> None:
        self.io.check_alive()
        self.cpu.check_alive()


@pytest.fixture
def roles(
    test_env: dict[str, str],
    es: Elasticsearch,
    monkeypatch_session: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[RoleStack]:
    """A private Redis, private indices and queues, the scripted model, and an I/O worker and
    a CPU worker as ``ops/`` runs them (no supervisor: a worker that exits stays gone)."""
    tag = uuid.uuid4().hex[:8]
    broker = PrivateRedis(tmp_path, ports=(6400, 6500))
    broker.start()
    RELEASE.clear()
    with FakeLLMServer() as model:
        model.responder = held_responder
        env = test_env | {
            "MEMQ_REDIS_URL": broker.url,
            "MEMQ_ES_INDEX_PREFIX": f"memqbroker-{tag}",
            "MEMQ_QUEUES_IO": f"broker-{tag}.io",
            "MEMQ_QUEUES_CPU": f"broker-{tag}.cpu",
            "MEMQ_QUEUES_BACKFILL": f"broker-{tag}.backfill",
            "MEMQ_LLM_BASE_URL": model.base_url,
            "MEMQ_LLM_TIMEOUT_S": "120",
            "MEMQ_EMBEDDER_KIND": "openai",
            "MEMQ_EMBEDDER_BASE_URL": model.base_url,
            "MEMQ_EMBEDDER_MODEL": "fake-embedder",
        }
        settings = settings_of(env, monkeypatch_session)
        names = ensure_indices(es, settings.es, settings.embedder.dims)
        app = create_celery(settings)
        io = RoleWorker(env, tmp_path / "io.log", "io")
        cpu = RoleWorker(env, tmp_path / "cpu.log", "cpu")
        try:
            with (
                running(io, lambda: io.ready_on(app, settings.queues.io)),
                running(cpu, lambda: cpu.ready_on(app, settings.queues.cpu)),
            ):
                yield RoleStack(app, broker, io, cpu, settings)
        finally:
            RELEASE.set()
            app.close()
            drop_indices(es, names)
            broker.stop()


@pytest.mark.parametrize("outage_s", [10, pytest.param(60, marks=pytest.mark.slow)])
def test_workers_keep_running_through_a_broker_stop(roles: RoleStack, outage_s: float) -> None:
    """Both roles stay up (same processes) while the broker is gone for ``outage_s``, and
    consume again once it is back: a job in flight before the stop and jobs waiting their
    turn finish, and a job submitted after the restart succeeds."""
    app, pids = roles.app, roles.pids()
    held = submit(app, extraction(f"fact: {HELD} {uuid.uuid4().hex[:6]}")).record.job_id
    sessions = [f"broker-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    jobs = [submit(app, conversation(i, sessions[i % 4])).record.job_id for i in range(24)]
    wait_terminal(app, jobs, 120, until_any=True)

    roles.broker.stop()
    RELEASE.set()  # the held call answers while the broker is away: its hand-on must wait
    down_until = time.monotonic() + outage_s
    while time.monotonic() < down_until:
        roles.check_alive()
        time.sleep(0.5)
    roles.broker.start()

    later = submit_when_possible(app, range(100, 102))
    statuses = wait_terminal(app, [held, *jobs, *later], 180)
    assert set(statuses.values()) == {JobStatus.SUCCEEDED}, unsucceeded(app, statuses)
    roles.check_alive()
    assert roles.pids() == pids


def extraction(text: str) -> AddRequest:
    return AddRequest(
        scope=Scope(user_id=f"broker-{uuid.uuid4().hex[:8]}"),
        messages=[MessageIn(role="user", content=text)],
    )
