"""The intake's failure model, row by row, on a stack of its own: a PRIVATE Elasticsearch node
and redis-server (tests/private_services.py), an API process and a worker on them. Callers post
through the API as users do.

- Elasticsearch down: adds answer 202 (held in Redis), their jobs can be read, and once the
  node is back each runs exactly once, in session order, under the id the caller was given.
- Redis down: adds answer 202 (parked in Elasticsearch), and once Redis is back the same holds.
  A chat-platform webhook is answered at once and its message is kept.
- Both down: 503 with Retry-After, nothing accepted.

Each row prints how long its adds took and how long after the store was back every job ended.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline.domain.jobs import TERMINAL_STATUSES
from tests.conftest import admin_key
from tests.fakellm import FakeLLMServer
from tests.private_services import PrivateElasticsearch, PrivateRedis
from tests.processes import ApiProcess, WorkerProcess, free_port

pytestmark = pytest.mark.integration

SESSIONS, JOBS_PER_SESSION = 3, 4
RECOVERY_S = 60.0  # from the store back to every job terminal (the bound)
WEBHOOK_SECRET = "outage-webhook-secret"
SLACK_DEADLINE_S = 3.0


class Stack:
    """Private Elasticsearch and Redis, an API and a worker on them, and a tenant key."""

    def __init__(self, env: dict[str, str], work: Path) -> None:
        self.es = PrivateElasticsearch(env)
        self.redis = PrivateRedis(work, ports=(6430, 6440))
        tag = uuid.uuid4().hex[:6]
        self.env = {
            **env,
            "MEMQ_ES_URL": self.es.url,
            "MEMQ_REDIS_URL": self.redis.url,
            "MEMQ_ES_INDEX_PREFIX": f"outage-{tag}",
            **{f"MEMQ_QUEUES_{q.upper()}": f"outage-{tag}.{q}" for q in ("io", "cpu", "backfill")},
            "MEMQ_API_PORT": str(free_port()),
            "MEMQ_API_ADMIN_KEY": admin_key(),
            "MEMQ_CHAT_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "MEMQ_CHAT_TENANT": f"outage-chat-{tag}",
            "MEMQ_CHAT_DEBOUNCE_S": "0.5",
            "MEMQ_WORKER_REAPER_INTERVAL_S": "2",
        }
        self.api = ApiProcess(self.env, work / "api.log")
        self.worker = WorkerProcess(self.env, work / "worker.log")
        self.key = self.chat_key = ""

    def start(self) -> None:
        self.redis.start()
        self.es.start()
        self.api.start()
        self.api.wait_ready()
        self.worker.start()
        self.key = self.new_key(f"outage-{uuid.uuid4().hex[:6]}")
        self.chat_key = self.new_key(self.env["MEMQ_CHAT_TENANT"])
        self.get("/v1/memories", params={"user_id": "warm-up"})  # the key is now cached

    def new_key(self, tenant: str) -> str:
        created = httpx.post(
            f"{self.api.url}/v1/admin/keys",
            json={"tenant": tenant},
            headers={"Authorization": f"Bearer {admin_key()}"},
            timeout=30,
        )
        created.raise_for_status()
        key: str = created.json()["key"]
        return key

    def stop(self) -> None:
        self.worker.stop()
        self.api.stop()
        self.redis.stop()
        self.es.remove()

    def keep_worker(self) -> None:
        """The supervisor's part (ops/supervise): a worker that exited is started again."""
        if self.worker.process is not None and self.worker.process.poll() is not None:
            self.worker.start()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(f"{self.api.url}{path}", headers=self.headers, timeout=30, **kwargs)

    def add(self, user: str, text: str, key: str | None = None) -> httpx.Response:
        headers = {**self.headers, **({"Idempotency-Key": key} if key else {})}
        body = {"messages": [{"role": "user", "content": text}], "user_id": user, "infer": False}
        return httpx.post(f"{self.api.url}/v1/memories", json=body, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def stack(test_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(test_env, tmp_path_factory.mktemp("outages"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


def post_during(stack: Stack, run: str) -> tuple[list[tuple[str, str]], float]:
    """JOBS_PER_SESSION conversations in each of SESSIONS sessions, interleaved; every answer
    must be 202. Returns (user, job id) in posting order and the slowest answer's seconds."""
    posted: list[tuple[str, str]] = []
    slowest = 0.0
    for number in range(JOBS_PER_SESSION):
        for session in range(SESSIONS):
            user = f"{run}-s{session}"
            began = time.monotonic()
            answer = stack.add(user, f"{run}: note {number} of session {session}.")
            slowest = max(slowest, time.monotonic() - began)
            assert answer.status_code == 202, answer.text
            posted.append((user, answer.json()["job_id"]))
    return posted, slowest


def wait_terminal(stack: Stack, job_ids: list[str], timeout_s: float) -> dict[str, Any]:
    """Every job's record once all are terminal (fails naming those that are not)."""
    deadline = time.monotonic() + timeout_s
    records: dict[str, Any] = {}
    while time.monotonic() < deadline:
        stack.keep_worker()
        for job_id in job_ids:
            if records.get(job_id, {}).get("status") in TERMINAL_STATUSES:
                continue
            answer = stack.get(f"/v1/jobs/{job_id}")
            if answer.status_code == 200:
                records[job_id] = answer.json()
        if all(records.get(j, {}).get("status") in TERMINAL_STATUSES for j in job_ids):
            return records
        time.sleep(0.5)
    late = {j: records.get(j, {}).get("status") for j in job_ids}
    pytest.fail(f"not terminal within {timeout_s:.0f} s: {late}")


def check_ran_once_in_order(stack: Stack, posted: list[tuple[str, str]], run: str) -> None:
    """Each job succeeded once, each session's jobs finished in posting order, and each
    session holds exactly one memory per job (each of its conversations is one message)."""
    records = wait_terminal(stack, [job_id for _, job_id in posted], RECOVERY_S)
    assert {r["status"] for r in records.values()} == {"succeeded"}, records
    for session in range(SESSIONS):
        user = f"{run}-s{session}"
        ids = [job_id for u, job_id in posted if u == user]
        finished = [records[job_id]["finished_at"] for job_id in ids]
        assert finished == sorted(finished), f"{user} ran out of order: {finished}"
        memories = stack.get("/v1/memories", params={"user_id": user, "limit": 100}).json()
        texts = sorted(m["memory"] for m in memories["results"])
        assert len(texts) == len(ids) == len(set(texts)), texts


def posted_while_down(
    stack: Stack, run: str, stop: Callable[[], None], start: Callable[[], Any]
) -> list[tuple[str, str]]:
    """Stop a store, post the conversations (every answer 202, the slowest printed), post one
    again (the same job, not created twice), read a job back, start the store, post one more
    at once, and check that every job ran once and in its session's order."""
    stop()
    try:
        posted, slowest = post_during(stack, run)
        user, job_id = posted[0]
        again = stack.add(user, f"{run}: note 0 of session 0.")
        assert (again.status_code, again.json()["job_id"]) == (202, job_id)
        assert again.json()["created"] is False
        known = stack.get(f"/v1/jobs/{job_id}")
        assert (known.status_code, known.json()["status"]) == (200, "queued"), known.text
        searched = stack.get("/v1/memories", params={"user_id": user})
        print(f"{run}: slowest add {slowest:.2f} s; a listing answered {searched.status_code}")
    finally:
        start()
    back = time.monotonic()
    late = stack.add(f"{run}-s0", f"{run}: posted once the store was back.")  # must not overtake
    assert late.status_code == 202, late.text
    posted.append((f"{run}-s0", late.json()["job_id"]))
    check_ran_once_in_order(stack, posted, run)
    print(f"{run}: every job ended {time.monotonic() - back:.1f} s after the store was back")
    return posted


def test_an_elasticsearch_outage_refuses_no_add(stack: Stack) -> None:
    posted_while_down(stack, f"es-{uuid.uuid4().hex[:6]}", stack.es.stop, stack.es.start)


def test_a_redis_outage_refuses_no_add(stack: Stack) -> None:
    posted_while_down(stack, f"redis-{uuid.uuid4().hex[:6]}", stack.redis.stop, stack.redis.start)


def generic_event(user: str, text: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"event_id": uuid.uuid4().hex, "conversation_id": user, "user_id": user, "content": text}
    ).encode()
    ts = str(int(time.time()))
    mac = hmac.new(WEBHOOK_SECRET.encode(), f"{ts}.".encode() + body, hashlib.sha256)
    return body, {
        "content-type": "application/json",
        "x-memq-timestamp": ts,
        "x-memq-signature": f"sha256={mac.hexdigest()}",
    }


def test_a_chat_message_during_a_redis_outage_is_answered_at_once_and_kept(
    stack: Stack, fake_llm: FakeLLMServer
) -> None:
    user = f"chat-{uuid.uuid4().hex[:6]}"
    fact = "Keeps a bike in the shed"
    fake_llm.script_chat(json.dumps({"memory": [{"text": fact, "attributed_to": "user"}]}))
    stack.redis.stop()
    try:
        body, headers = generic_event(user, "I keep my bike in the shed.")
        began = time.monotonic()
        answer = httpx.post(
            f"{stack.api.url}/v1/webhooks/generic", content=body, headers=headers, timeout=30
        )
        took = time.monotonic() - began
        assert answer.status_code == 200 and answer.json()["accepted"], answer.text
        assert took < SLACK_DEADLINE_S, f"answered in {took:.2f} s"
    finally:
        stack.redis.start()
    deadline = time.monotonic() + RECOVERY_S
    found: list[str] = []
    while time.monotonic() < deadline and not found:
        stack.keep_worker()
        listed = httpx.get(
            f"{stack.api.url}/v1/memories",
            params={"user_id": user},
            headers={"Authorization": f"Bearer {stack.chat_key}"},
            timeout=30,
        )
        if listed.status_code == 200:
            found = [m["memory"] for m in listed.json()["results"]]
        time.sleep(0.5)
    assert found == [fact]


def test_both_stores_down_answer_503_with_retry_after(stack: Stack) -> None:
    stack.redis.stop()
    stack.es.stop()
    try:
        answer = stack.add(f"both-{uuid.uuid4().hex[:6]}", "Nothing can keep this.")
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["Retry-After"]) > 0
    finally:
        stack.redis.start()
        stack.es.start()
