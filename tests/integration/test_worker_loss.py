"""A killed worker costs seconds, not the broker's visibility timeout: real I/O (threads) and
CPU (prefork) workers of this checkout, run as ``ops/`` runs them, are SIGKILLed while a phase
of theirs is held open by the scripted model, and their jobs finish once a worker is back.

The workers run with memq's defaults for everything this is about (visibility timeout 900 s,
lease and reaper settings): on a broker alone, a job whose worker died would come back only
after 900 s. The task time limit is 30 s instead of 10 minutes, so that the I/O pool's own
limit shows within a test. A job that kills its worker every time (poison) ends ``dead``."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.domain.state import JobState, Phase
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames, Kind, drop_indices, ensure_indices
from pipeline.store.protocol import JobRecord
from tests.conftest import running
from tests.fakellm import Delay, FakeLLMServer, Normal
from tests.integration.test_pipeline import facts_from_conversation
from tests.private_services import PrivateRedis, free_port
from tests.processes import WorkerProcess
from workers.app import HEALTH_TASK, MemqCelery, create_celery
from workers.intake import submit
from workers.names import GATHER_TASK
from workers.scheduler.batches import LIVE

pytestmark = pytest.mark.integration

TERMINAL = {"succeeded", "failed", "dead"}
RECOVERY_BOUND_S = 60.0  # the goal: done within this of a live worker being there again
HOLD_S = 40.0  # a phase held open by the model this long is surely running when killed
POISON = "poison-pill"
MAX_DELIVERIES = 3
TIME_LIMIT_S = 30
KILL_AFTER_S = 4.0  # into the poisoned call (held 8 s): its batch-mates' calls are long done


class RoleWorker(WorkerProcess):
    """``memq worker --role io|cpu``: the pool kind and queues ``ops/`` gives that role."""

    def __init__(self, env: dict[str, str], log_path: Path, role: str) -> None:
        super().__init__(env, log_path)
        self.role = role

    def argv(self) -> list[str]:
        return ["worker", f"--role={self.role}", f"--hostname=memqloss-{self.role}@%h"]

    def ready_on(self, app: MemqCelery, queue: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                app.send_task(HEALTH_TASK, queue=queue).get(timeout=3)
                return
            except Exception:  # not consuming yet
                continue
        raise RuntimeError(f"{self.role} worker not ready within {timeout_s}s: {self.tail()}")

    def sigkill(self) -> None:
        """SIGKILL the worker's process group (a prefork parent and its children alike)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@dataclass
class Stack:
    app: MemqCelery
    store: ElasticStore
    es: Elasticsearch
    names: IndexNames
    model: FakeLLMServer
    io: RoleWorker
    cpu: RoleWorker
    settings: Settings

    def restart(self, worker: RoleWorker) -> float:
        """Start ``worker`` again; the monotonic time it is consuming."""
        worker.start()
        queue = self.settings.queues.io if worker.role == "io" else self.settings.queues.cpu
        worker.ready_on(self.app, queue)
        return time.monotonic()


STRAGGLER = "straggler"
GATE = threading.Event()  # a straggler's call is held until a test opens this


def responder(request: dict[str, Any]) -> str:
    """Facts of the conversation; a poisoned one is held a while, so it dies mid-call, and a
    straggler's call until the test lets it answer."""
    content = request["messages"][-1]["content"]
    if POISON in content:
        time.sleep(8)
    if STRAGGLER in content:
        GATE.wait(timeout=90)
    return facts_from_conversation(request)


@pytest.fixture(scope="module")
def stack(
    test_env: dict[str, str],
    es: Elasticsearch,
    redis_client: redis.Redis,
    monkeypatch_session: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """Private indices, queues and model; an I/O worker and a CPU worker as ``ops/`` runs them,
    with memq's defaults for timeouts, leases and the reaper."""
    tag = uuid.uuid4().hex[:8]
    # A Redis of the module's own: kombu keeps the unacknowledged messages of every app on a
    # Redis database in one index, restored by any worker whose visibility timeout they outlive;
    # on the shared Redis, other runs' workers (with a 30 s timeout) would bring ours back.
    broker = PrivateRedis(tmp_path_factory.mktemp("worker-loss-redis"))
    broker.port = free_port(6410, 6420)
    broker.start()
    defaults = {"MEMQ_WORKER_VISIBILITY_TIMEOUT_S"}
    with FakeLLMServer() as model:
        model.responder = responder
        env = {k: v for k, v in test_env.items() if k not in defaults}
        env |= {
            "MEMQ_REDIS_URL": broker.url,
            "MEMQ_ES_INDEX_PREFIX": f"memqloss-{tag}",
            "MEMQ_QUEUES_IO": f"loss-{tag}.io",
            "MEMQ_QUEUES_CPU": f"loss-{tag}.cpu",
            "MEMQ_QUEUES_BACKFILL": f"loss-{tag}.backfill",
            "MEMQ_LLM_BASE_URL": model.base_url,
            "MEMQ_LLM_TIMEOUT_S": "120",
            "MEMQ_EMBEDDER_KIND": "openai",
            "MEMQ_EMBEDDER_BASE_URL": model.base_url,
            "MEMQ_EMBEDDER_MODEL": "fake-embedder",
            "MEMQ_EMBEDDER_TIMEOUT_S": "120",
            "MEMQ_WORKER_MAX_DELIVERIES": str(MAX_DELIVERIES),
            "MEMQ_WORKER_WAVE_MS": "500",  # extraction in waves (the default, kept explicit)
            "MEMQ_WORKER_TASK_SOFT_TIME_LIMIT_S": str(TIME_LIMIT_S - 5),
            "MEMQ_WORKER_TASK_TIME_LIMIT_S": str(TIME_LIMIT_S),
        }
        with monkeypatch_session.context() as patch:
            for key in [k for k in os.environ if k.startswith("MEMQ_")]:
                patch.delenv(key)
            for key, value in env.items():
                if key.startswith("MEMQ_"):
                    patch.setenv(key, value)
            settings = Settings()
        names = ensure_indices(es, settings.es, settings.embedder.dims)
        app = create_celery(settings)
        logs = tmp_path_factory.mktemp("worker-loss")
        io, cpu = RoleWorker(env, logs / "io.log", "io"), RoleWorker(env, logs / "cpu.log", "cpu")
        try:
            with (
                running(io, lambda: io.ready_on(app, settings.queues.io)),
                running(cpu, lambda: cpu.ready_on(app, settings.queues.cpu)),
            ):
                yield Stack(app, app.runtime.store, es, names, model, io, cpu, settings)
        finally:
            app.close()
            drop_indices(es, names)
            broker.stop()


def ask(scope: Scope, *facts: str) -> AddRequest:
    text = "\n".join(f"fact: {f}" for f in facts)
    return AddRequest(scope=scope, messages=[MessageIn(role="user", content=text)])


def new_scope() -> Scope:
    return Scope(tenant="it", user_id=f"loss-{uuid.uuid4().hex[:8]}")


def wait_job(store: ElasticStore, job_id: str, timeout_s: float) -> JobRecord:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = store.get_job(job_id)
        if record is not None and record.status in TERMINAL:
            return record
        time.sleep(0.2)
    raise AssertionError(
        f"job {job_id} not finished within {timeout_s:.0f}s: {store.get_job(job_id)}"
    )


def wait_for(what: str, check: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"never saw {what} within {timeout_s}s")


def memories_of(stack: Stack, scope: Scope) -> list[str]:
    index = stack.names.alias(Kind.MEMORIES)
    stack.es.indices.refresh(index=index)
    query = {"term": {"user_id": scope.user_id}}
    hits = stack.es.search(index=index, query=query, size=100)["hits"]["hits"]
    return sorted(hit["_source"]["text"] for hit in hits)


def requests_saying(stack: Stack, path_end: str, text: str) -> int:
    return sum(
        1 for path, body in stack.model.requests if path.endswith(path_end) and text in str(body)
    )


def test_an_io_worker_killed_in_extract_costs_seconds_and_its_session_goes_on(
    stack: Stack,
) -> None:
    scope = new_scope()
    marker = f"tea-{uuid.uuid4().hex[:6]}"
    stack.model.script_chat(Delay(HOLD_S, Normal()))  # the first extraction is held open
    first = submit(stack.app, ask(scope, f"likes {marker}")).record.job_id
    second = submit(stack.app, ask(scope, f"plays {marker} chess")).record.job_id
    wait_for("the held extraction", lambda: requests_saying(stack, "/chat/completions", marker))
    stack.io.sigkill()
    back = stack.restart(stack.io)

    done = wait_job(stack.store, first, RECOVERY_BOUND_S)
    assert done.status == "succeeded", done
    assert time.monotonic() - back < RECOVERY_BOUND_S
    after = wait_job(stack.store, second, RECOVERY_BOUND_S)  # the session's next job runs
    assert after.status == "succeeded", after
    assert memories_of(stack, scope) == sorted([f"likes {marker}", f"plays {marker} chess"])


def test_a_cpu_worker_killed_in_retrieve_costs_seconds_and_its_session_goes_on(
    stack: Stack,
) -> None:
    scope = new_scope()
    marker = f"jazz-{uuid.uuid4().hex[:6]}"
    stack.model.script_embeddings(Delay(HOLD_S, Normal()))  # retrieve's embedding is held open
    first = submit(stack.app, ask(scope, f"likes {marker}")).record.job_id
    wait_for("the held embedding", lambda: requests_saying(stack, "/embeddings", marker))
    # The session's next job only now: queued before the first batch started, its new turn
    # would be embedded ahead on the CPU queue beside retrieve (``memq.batch.prepare``), and
    # the held call could be that one, leaving the kill to land in another phase.
    second = submit(stack.app, ask(scope, f"hums {marker} tunes")).record.job_id
    stack.cpu.sigkill()
    back = stack.restart(stack.cpu)

    done = wait_job(stack.store, first, RECOVERY_BOUND_S)
    assert done.status == "succeeded", done
    assert time.monotonic() - back < RECOVERY_BOUND_S
    after = wait_job(stack.store, second, RECOVERY_BOUND_S)
    assert after.status == "succeeded", after
    assert memories_of(stack, scope) == sorted([f"likes {marker}", f"hums {marker} tunes"])


def test_a_job_that_kills_its_worker_every_time_ends_dead_and_its_batch_mates_succeed(
    stack: Stack,
) -> None:
    """Whenever the poisoned conversation reaches the model, its worker dies (SIGKILL, as the
    kernel's out-of-memory killer would): first with its batch-mates, then alone."""
    scopes = [new_scope() for _ in range(3)]
    marker = uuid.uuid4().hex[:6]
    facts = [f"{POISON} {marker}", f"likes {marker} tea", f"reads {marker} books"]
    job_ids = [batch_ready(stack, scope, fact) for scope, fact in zip(scopes, facts, strict=True)]
    stack.app.send_task(GATHER_TASK, args=(LIVE,), queue=stack.settings.queues.io)

    kills, seen_at, deadline = 0, 0.0, time.monotonic() + 300
    while (record := stack.store.get_job(job_ids[0])) is None or record.status not in TERMINAL:
        assert time.monotonic() < deadline, f"poisoned job never ended: {record}"
        if not seen_at and requests_saying(stack, "/chat/completions", facts[0]) > kills:
            seen_at = time.monotonic()
        if seen_at and time.monotonic() - seen_at > KILL_AFTER_S:  # dies mid-call
            stack.io.sigkill()
            kills, seen_at = kills + 1, 0.0
            stack.restart(stack.io)
        time.sleep(0.2)

    assert record.status == "dead", record
    assert record.reason is not None and "worker died 3 times" in record.reason, record.reason
    assert kills == MAX_DELIVERIES
    for job_id, scope, fact in zip(job_ids[1:], scopes[1:], facts[1:], strict=True):
        mate = wait_job(stack.store, job_id, RECOVERY_BOUND_S)
        assert mate.status == "succeeded", mate
        assert memories_of(stack, scope) == [fact]
    assert memories_of(stack, scopes[0]) == []


def batch_ready(stack: Stack, scope: Scope, fact: str) -> str:
    """A job accepted and made ready with no gather sent yet: the next gather batches it."""
    now = datetime.now(UTC)
    state = JobState(job_id=uuid.uuid4().hex, request=ask(scope, fact), received_at=now)
    states = stack.app.runtime.states
    states.enter(state, now)
    states.push_ready(LIVE, state.job_id)
    return state.job_id


def test_a_line_head_that_nothing_runs_is_run_and_its_session_goes_on(stack: Stack) -> None:
    """Two heads with no live owner: one whose batch run is gone (it stopped after context),
    one never started (its intake died after joining the line). The reaper runs both, and the
    jobs queued behind them follow."""
    lost_run, never = new_scope(), new_scope()
    marker = uuid.uuid4().hex[:6]
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    states = stack.app.runtime.states
    heads = []
    for scope, fact, changes in (
        (
            lost_run,
            f"rows {marker} boats",
            {"run": "a-batch-that-is-gone", "done": (Phase.CONTEXT,)},
        ),
        (never, f"grows {marker} roses", {}),
    ):
        state = JobState(job_id=uuid.uuid4().hex, request=ask(scope, fact), received_at=long_ago)
        states.enter(state.model_copy(update=changes), long_ago)
        heads.append(state.job_id)
    behind = [
        submit(stack.app, ask(scope, f"{verb} {marker} later")).record.job_id
        for scope, verb in ((lost_run, "sails"), (never, "waters"))
    ]
    for job_id in heads + behind:
        record = wait_job(stack.store, job_id, RECOVERY_BOUND_S)
        assert record.status == "succeeded", record
    assert memories_of(stack, lost_run) == sorted([f"rows {marker} boats", f"sails {marker} later"])
    assert memories_of(stack, never) == sorted([f"grows {marker} roses", f"waters {marker} later"])


def test_a_line_head_running_past_any_age_keeps_its_session_in_order(stack: Stack) -> None:
    """A head accepted long ago (here: its acceptance time set two hours back, as after a long
    backlog) is still running: the job behind it waits for it instead of running beside it."""
    scope = new_scope()
    marker = f"order-{uuid.uuid4().hex[:6]}"
    stack.model.script_chat(Delay(20, Normal()))
    first = submit(stack.app, ask(scope, f"first {marker}")).record.job_id
    long_ago = (datetime.now(UTC) - timedelta(hours=2)).timestamp()
    stack.app.runtime.redis.set(
        f"memq:{stack.settings.es.index_prefix}:job:{first}:accepted", long_ago
    )
    wait_for("the held extraction", lambda: requests_saying(stack, "/chat/completions", marker))
    second = submit(stack.app, ask(scope, f"second {marker}")).record.job_id

    a = wait_job(stack.store, first, 90)
    b = wait_job(stack.store, second, 90)
    assert (a.status, b.status) == ("succeeded", "succeeded")
    assert a.finished_at is not None and b.finished_at is not None
    assert b.finished_at > a.finished_at
    # the second saw the first's conversation as its context: it ran after the first ended
    seconds = [str(body) for body in stack.model.chat_requests() if f"second {marker}" in str(body)]
    assert seconds and all(f"first {marker}" in body for body in seconds)


def test_an_io_call_over_the_time_limit_is_given_up_and_its_job_runs_elsewhere(
    stack: Stack,
) -> None:
    """The threads pool ignores Celery's time limits: an extraction held by the model for
    three times the limit is given up at the limit, its job runs again and succeeds while the held
    call is still waiting, and what that call returns later is dropped."""
    scope = new_scope()
    marker = f"slow-{uuid.uuid4().hex[:6]}"
    hold_s = 3 * TIME_LIMIT_S
    stack.model.script_chat(Delay(hold_s, Normal()))
    started = time.monotonic()
    job_id = submit(stack.app, ask(scope, f"waits {marker}")).record.job_id

    record = wait_job(stack.store, job_id, hold_s)
    assert record.status == "succeeded", record
    assert time.monotonic() - started < hold_s  # the held call has not even answered yet
    time.sleep(max(0.0, hold_s - (time.monotonic() - started)) + 5)  # now it has, and is dropped
    assert memories_of(stack, scope) == [f"waits {marker}"]
    assert "overran its 30 s time limit" in stack.io.log_path.read_text()


def straggler_batch(stack: Stack) -> tuple[list[Scope], list[str], list[str]]:
    """Three jobs gathered as one batch: two whose calls answer at once, and a straggler whose
    call is held (``GATE``). Returns their scopes, facts and job ids, straggler first."""
    GATE.clear()
    scopes = [new_scope() for _ in range(3)]
    marker = uuid.uuid4().hex[:6]
    facts = [f"{STRAGGLER} {marker} naps", f"likes {marker} figs", f"reads {marker} maps"]
    job_ids = [batch_ready(stack, scope, fact) for scope, fact in zip(scopes, facts, strict=True)]
    stack.app.send_task(GATHER_TASK, args=(LIVE,), queue=stack.settings.queues.io)
    return scopes, facts, job_ids


def test_jobs_whose_calls_answered_go_on_ahead_of_a_straggler_in_their_batch(
    stack: Stack,
) -> None:
    """Extraction in waves: the two jobs whose calls answered end while the straggler's call
    is still held (so they did not wait for it), then the straggler ends too; one batch of
    three, one call each, each memory once."""
    scopes, facts, job_ids = straggler_batch(stack)
    try:
        mates = [wait_job(stack.store, job_id, RECOVERY_BOUND_S) for job_id in job_ids[1:]]
        held = stack.store.get_job(job_ids[0])
        assert held is not None and held.status == "running", held  # its call is still held
    finally:
        GATE.set()
    straggler = wait_job(stack.store, job_ids[0], RECOVERY_BOUND_S)
    for record in (straggler, *mates):
        assert record.status == "succeeded", record
        assert record.counts["batch_size"] == 3
    for scope, fact in zip(scopes, facts, strict=True):
        assert memories_of(stack, scope) == [fact]
        assert requests_saying(stack, "/chat/completions", fact) == 1


def test_a_batch_whose_worker_dies_after_a_wave_runs_only_the_straggler_again(
    stack: Stack,
) -> None:
    """The I/O worker is SIGKILLed while the straggler's call is held, after its batch-mates
    went on in a wave and ended: the recovery sends on the straggler alone, the wave's jobs
    are not run again, and every memory is stored once."""
    scopes, facts, job_ids = straggler_batch(stack)
    try:
        for job_id in job_ids[1:]:
            assert wait_job(stack.store, job_id, RECOVERY_BOUND_S).status == "succeeded"
        stack.io.sigkill()
    finally:
        GATE.set()  # the call retried after the restart answers
    back = stack.restart(stack.io)
    straggler = wait_job(stack.store, job_ids[0], RECOVERY_BOUND_S)
    assert straggler.status == "succeeded", straggler
    print(f"straggler ended {time.monotonic() - back:.1f} s after the worker was back")
    for scope, fact in zip(scopes, facts, strict=True):
        assert memories_of(stack, scope) == [fact]
    assert requests_saying(stack, "/chat/completions", facts[0]) == 2  # killed, then again
    for fact in facts[1:]:
        assert requests_saying(stack, "/chat/completions", fact) == 1


def test_a_live_batch_waiting_on_the_provider_gives_its_slot_up(stack: Stack) -> None:
    """Both batch slots go to batches whose only call is held (``MEMQ_WORKER_BATCHES_IN_FLIGHT``
    is 2). A job made ready after them starts once their calls have been out for
    ``MEMQ_WORKER_WAVE_MS`` and ends while they are still held, instead of waiting for a
    slot until one of them ends; then they end too, one call and one memory each."""
    assert stack.settings.worker.batches_in_flight == 2
    GATE.clear()
    marker = uuid.uuid4().hex[:6]
    held = [(new_scope(), f"{STRAGGLER} {marker} naps {n}") for n in range(2)]
    job_ids = []
    try:
        for scope, fact in held:
            job_ids.append(batch_ready(stack, scope, fact))
            stack.app.send_task(GATHER_TASK, args=(LIVE,), queue=stack.settings.queues.io)
            wait_for("a held call", lambda f=fact: requests_saying(stack, "/chat/completions", f))
        late_scope, late_fact = new_scope(), f"likes {marker} plums"
        started = time.monotonic()
        late = batch_ready(stack, late_scope, late_fact)
        stack.app.send_task(GATHER_TASK, args=(LIVE,), queue=stack.settings.queues.io)
        record = wait_job(stack.store, late, RECOVERY_BOUND_S)
        print(f"the late job ended {time.monotonic() - started:.1f} s after it was made ready")
        assert record.status == "succeeded", record
        for job_id in job_ids:
            still = stack.store.get_job(job_id)
            assert still is not None and still.status == "running", still  # still held
    finally:
        GATE.set()
    for (scope, fact), job_id in zip(held, job_ids, strict=True):
        assert wait_job(stack.store, job_id, RECOVERY_BOUND_S).status == "succeeded"
        assert memories_of(stack, scope) == [fact]
        assert requests_saying(stack, "/chat/completions", fact) == 1
    assert memories_of(stack, late_scope) == [late_fact]
