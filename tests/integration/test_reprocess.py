"""``memq reprocess --reembed`` on the real stack: a worker and an API process of their own
(their own index prefix and queues), embedding with one OpenAI-compatible endpoint of 64
dimensions, moved to another of 128 while a thread adds memories and another searches. Nothing
added is lost, no search fails, and after the swap the API and the worker embed with the new
endpoint, though their environment still names the old one. A second test kills the command
halfway (SIGKILL) and runs it again: the resumed run embeds only what the first left."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from elasticsearch import ApiError, Elasticsearch

from memq.cli import main
from pipeline.config import Settings
from pipeline.domain.jobs import JobStatus
from pipeline.store.indices import IndexNames, Kind
from tests.fakellm import FakeLLMServer
from tests.integration.private_stack import private_stack
from tests.integration.test_api import Tenant, create_tenant, wait_until
from tests.processes import MemqProcess, WorkerProcess, free_port
from workers.app import MemqCelery
from workers.scheduler.state_store import RedisStateStore

pytestmark = pytest.mark.integration

OLD_DIMS, NEW_DIMS = 64, 128
SEEDED = 120


class ReprocessProcess(MemqProcess):
    """``memq reprocess`` with the given options."""

    def __init__(self, env: dict[str, str], log_path: Path, options: list[str]) -> None:
        super().__init__(env, log_path)
        self.options = options

    def argv(self) -> list[str]:
        return ["reprocess", *self.options]

    def wait(self, timeout_s: float = 300) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout_s)


@dataclass
class Stack:
    env: dict[str, str]
    names: IndexNames
    tenant: Tenant
    admin: httpx.Client
    new: FakeLLMServer
    logs: Path
    worker: WorkerProcess
    app: MemqCelery


@pytest.fixture
def stack(
    test_env: dict[str, str],
    settings: Settings,
    es: Elasticsearch,
    tmp_path: Path,
) -> Iterator[Stack]:
    """A worker and an API over a prefix and queues of their own, embedding with ``old``."""
    with FakeLLMServer(dims=OLD_DIMS) as old, FakeLLMServer(dims=NEW_DIMS) as new:
        embedder = {
            "MEMQ_EMBEDDER_KIND": "openai",
            "MEMQ_EMBEDDER_MODEL": "old-embedder",
            "MEMQ_EMBEDDER_DIMS": str(OLD_DIMS),
            "MEMQ_EMBEDDER_BASE_URL": old.base_url,
        }
        with private_stack(test_env, settings, es, tmp_path, "rp", embedder) as private:
            tenant = create_tenant(private.admin, private.api_url, "reprocess")
            yield Stack(private.env, private.names, tenant, private.admin, new, tmp_path,
                        private.worker, private.app)  # fmt: skip
            tenant.http.close()


def reembed_options(stack: Stack, *extra: str) -> list[str]:
    return [
        "--reembed", "--embedder-model", "new-embedder", "--embedder-dims", str(NEW_DIMS),
        "--embedder-base-url", stack.new.base_url, *extra,
    ]  # fmt: skip


def add(tenant: Tenant, text: str, user_id: str, **fields: Any) -> str:
    """Send one conversation, a raw turn unless ``fields`` say otherwise (a 503 while writes
    are paused is retried); its status URL."""
    body = {"messages": text, "user_id": user_id, "infer": False, **fields}
    while True:
        response = tenant.http.post("/v1/memories", json=body)
        if response.status_code == 503:
            time.sleep(float(response.headers.get("Retry-After", "1")))
            continue
        assert response.status_code == 202, response.text
        return str(response.json()["status_url"])


def finished(tenant: Tenant, url: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        job: dict[str, Any] = tenant.http.get(url).json()
        terminal = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.DEAD)
        return job if job["status"] in terminal else None

    return wait_until(ended, "a job to end", 120)


def seed(tenant: Tenant, count: int) -> dict[str, str]:
    """``count`` memories of one user: text -> memory id."""
    urls = {f"Seeded fact {i} about the {uuid.uuid4().hex[:8]} garden": "" for i in range(count)}
    for text in urls:
        urls[text] = add(tenant, text, "seeded")
    ids = {}
    for text, url in urls.items():
        job = finished(tenant, url)
        assert job["status"] == JobStatus.SUCCEEDED, job
        ids[text] = job["results"][0]["id"]
    return ids


def top_hit(tenant: Tenant, text: str) -> str:
    body = {"query": text, "user_id": "seeded", "top_k": 1}
    response = tenant.http.post("/v1/memories/search", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["results"][0]["id"])


@dataclass
class Traffic:
    """Adds and searches in threads until ``stop``; what each came to."""

    tenant: Tenant
    stop: threading.Event = field(default_factory=threading.Event)
    added: dict[str, str] = field(default_factory=dict)  # text -> status URL
    searches: int = 0
    failed_searches: list[str] = field(default_factory=list)

    def adding(self) -> None:
        i = 0
        while not self.stop.is_set():
            text = f"Live fact {i} about the {uuid.uuid4().hex[:8]} orchard"
            self.added[text] = add(self.tenant, text, "live")
            i += 1
            time.sleep(0.05)

    def searching(self, texts: list[str]) -> None:
        i = 0
        while not self.stop.is_set():
            body = {"query": texts[i % len(texts)], "user_id": "seeded", "top_k": 3}
            response = self.tenant.http.post("/v1/memories/search", json=body)
            self.searches += 1
            if response.status_code != 200:
                self.failed_searches.append(f"HTTP {response.status_code} {response.text[:200]}")
            i += 1


def test_a_dimension_change_loses_no_add_and_fails_no_search(
    stack: Stack, es: Elasticsearch
) -> None:
    seeded = seed(stack.tenant, SEEDED)
    traffic = Traffic(stack.tenant)
    threads = [
        threading.Thread(target=traffic.adding),
        threading.Thread(target=traffic.searching, args=(list(seeded),)),
    ]
    for thread in threads:
        thread.start()
    time.sleep(1)
    command = ReprocessProcess(stack.env, stack.logs / "reprocess.log",
                               reembed_options(stack, "--rate", "100"))  # fmt: skip
    command.start()
    assert command.wait() == 0, command.tail()
    time.sleep(3)  # traffic goes on after the swap
    traffic.stop.set()
    for thread in threads:
        thread.join()
    jobs = {text: finished(stack.tenant, url) for text, url in traffic.added.items()}
    lost = [text for text, job in jobs.items() if job["status"] != JobStatus.SUCCEEDED]
    assert lost == [], [jobs[t] for t in lost[:3]]
    assert traffic.failed_searches == [], traffic.failed_searches[:3]
    assert len(traffic.added) > 10 and traffic.searches > 10
    listed = stack.tenant.http.get("/v1/memories", params={"user_id": "live", "page_size": 1000})
    assert sorted(m["memory"] for m in listed.json()["results"]) == sorted(jobs)

    # the version in use holds vectors of 128 dimensions, and says whose
    mapping = es.indices.get_mapping(index=stack.names.memories).body
    (body,) = mapping.values()
    assert body["mappings"]["properties"]["embedding"]["dims"] == NEW_DIMS
    status = stack.admin.get("/v1/admin/reprocess").json()
    assert status["embedder"] == {"kind": "openai", "model": "new-embedder", "dims": NEW_DIMS,
                                  "base_url": stack.new.base_url}  # fmt: skip
    states = sorted((v["kind"], v["state"]) for v in status["versions"])
    assert states == [("entities", "in use"), ("entities", "old"), ("memories", "in use"),
                      ("memories", "old")]  # fmt: skip

    # searches and new memories are embedded by the new endpoint now
    stack.new.reset()
    text, memory_id = next(iter(seeded.items()))
    assert top_hit(stack.tenant, text) == memory_id
    job = finished(stack.tenant, add(stack.tenant, "A fact added after the swap", "after"))
    assert job["status"] == JobStatus.SUCCEEDED, job
    embedded = [body["input"] for path, body in stack.new.requests if path.endswith("embeddings")]
    assert [text] in embedded and ["A fact added after the swap"] in embedded

    # each re-embedded memory's history says so, with the embedder
    history = stack.tenant.http.get(f"/v1/memories/{memory_id}/history").json()
    events = [(row["event"], row.get("new")) for row in history]
    assert events[-1][0] == "REPROCESS", events

    # the old version stays until --drop-old
    dropper = ReprocessProcess(stack.env, stack.logs / "drop.log", ["--drop-old"])
    dropper.start()
    assert dropper.wait() == 0, dropper.tail()
    status = stack.admin.get("/v1/admin/reprocess").json()
    assert sorted(v["state"] for v in status["versions"]) == ["in use", "in use"]


def test_a_killed_reprocess_resumes_where_it_was(stack: Stack, es: Elasticsearch) -> None:
    seeded = seed(stack.tenant, SEEDED)
    dry = subprocess.run(
        ReprocessProcess(stack.env, stack.logs / "dry.log",
                         reembed_options(stack, "--dry-run")).command(),
        env=stack.env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert f"{SEEDED} memories" in dry.stderr and "0 LLM calls" in dry.stderr, dry.stderr
    first = ReprocessProcess(stack.env, stack.logs / "first.log",
                             reembed_options(stack, "--rate", "30"))  # fmt: skip
    first.start()
    target = f"{stack.names.memories}-v2-e"

    def halfway() -> int | None:
        builds = es.indices.get(index=f"{target}*", ignore_unavailable=True).body
        if not builds:
            return None
        (build,) = builds
        try:
            held = int(es.count(index=build)["count"])
        except ApiError:  # its shards are starting
            return None
        return held if held >= 30 else None

    held = wait_until(halfway, "the build to be a quarter done", 60)
    assert stack.admin.get("/v1/admin/reprocess").json()["active"] is True
    first.kill()
    assert held < SEEDED

    def stopped() -> dict[str, Any] | None:  # the lock lapses with the process that held it
        status: dict[str, Any] = stack.admin.get("/v1/admin/reprocess").json()
        return None if status["active"] else status

    status = wait_until(stopped, "the killed run's lock to lapse", 40)
    (build,) = [
        v for v in status["versions"] if v["state"] == "building" and v["kind"] == "memories"
    ]
    assert build["progress"]["stage"] == "sync", build  # where it stopped; updated_at is its last
    shown = subprocess.run(
        ReprocessProcess(stack.env, stack.logs / "status.log", ["--status"]).command(),
        env=stack.env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "active run: none" in shown.stdout and f"{build['index']} " in shown.stdout
    assert "building" in shown.stdout and "reembed sync memories" in shown.stdout, shown.stdout
    second = ReprocessProcess(stack.env, stack.logs / "second.log", reembed_options(stack))
    second.start()
    assert second.wait() == 0, second.tail()
    log = (stack.logs / "second.log").read_text()
    assert "memories:" in log
    re_embedded = int(log.split("re-embedded ")[1].split(" ")[0])
    entities = int(es.count(index=stack.names.entities)["count"])
    assert re_embedded < SEEDED + entities  # the resumed run skipped what the first built
    for text, memory_id in list(seeded.items())[:5]:
        assert top_hit(stack.tenant, text) == memory_id
    again = ReprocessProcess(stack.env, stack.logs / "again.log", reembed_options(stack))
    again.start()
    assert again.wait() == 2  # the version in use is of that embedder already
    assert "already hold vectors of" in again.tail()


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        ([], "name a mode (--reembed or --reextract)"),
        (["--reembed", "--embedder-dims", "4"], "--embedder-dims must be 8..4096"),
    ],
)
def test_bad_options_are_refused_before_anything_is_touched(
    settings: Settings, capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    assert main(["reprocess", *argv]) == 2
    assert complaint in capsys.readouterr().err


def reembed_body(stack: Stack, **extra: Any) -> dict[str, Any]:
    embedder = {"model": "new-embedder", "dims": NEW_DIMS, "base_url": stack.new.base_url}
    return {"mode": "reembed", "embedder": embedder, **extra}


def builds_of(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["kind"]: v for v in status["versions"] if v["state"] == "building"}


def test_the_status_answers_while_a_build_is_still_starting(
    stack: Stack, es: Elasticsearch
) -> None:
    """A build a worker has just created has no started shard for a while, and a count of it
    fails then: the status lists it with no documents instead of failing (its shard here is
    held unassigned, so the moment lasts)."""
    starting = f"{stack.names.alias(Kind.MEMORIES)}-v0-starting"
    held = {"number_of_replicas": 0, "index.routing.allocation.require._name": "no-such-node"}
    es.indices.create(index=starting, settings=held, wait_for_active_shards="0")
    try:
        with pytest.raises(ApiError):
            es.count(index=starting)
        status = stack.admin.get("/v1/admin/reprocess")
        assert status.status_code == 200, status.text
        version = next(v for v in status.json()["versions"] if v["index"] == starting)
        assert (version["state"], version["documents"]) == ("old", 0), version
    finally:
        es.indices.delete(index=starting)


def test_a_reembed_started_over_http_runs_on_a_worker_and_reports_its_progress(
    stack: Stack,
) -> None:
    seeded = seed(stack.tenant, 60)
    url = "/v1/admin/reprocess"
    refused = stack.tenant.http.post(url, json=reembed_body(stack))
    assert refused.status_code in {401, 403}, refused.text
    for bad, where in [
        ({"embedder": {"dims": 4}}, "embedder.dims"),
        ({"embedder": {"kind": "word2vec"}}, "embedder.kind"),
        ({"rate": 0}, "rate"),
        ({"mode": "reindex"}, "mode"),
        ({"tenant": "someone"}, "tenant"),
        ({"shards": 3}, "shards"),
    ]:
        response = stack.admin.post(url, json={**reembed_body(stack), **bad})
        assert response.status_code == 422, (bad, response.text)
        assert response.json()["error"]["field"] == where, response.text
    same = stack.admin.post(url, json={"mode": "reembed"})  # the settings' embedder: in use
    assert same.status_code == 409 and "already hold vectors" in same.text, same.text

    dry = stack.admin.post(url, json=reembed_body(stack, dry_run=True))
    assert dry.status_code == 200, dry.text
    assert dry.json()["memories"] == 60 and dry.json()["embedder"]["dims"] == NEW_DIMS
    assert stack.admin.get(url).json()["active"] is False

    started = stack.admin.post(url, json=reembed_body(stack, rate=10))  # pages of 10, 1 s apart
    assert started.status_code == 202, started.text
    answer = started.json()
    assert answer["status_url"].endswith(url) and len(answer["builds"]) == 2
    again = stack.admin.post(url, json=reembed_body(stack))
    assert again.status_code == 409 and "running already" in again.text, again.text

    seen: list[tuple[bool, str, str | None, int]] = []

    def switched() -> dict[str, Any] | None:
        response = stack.admin.get(url)
        assert response.status_code == 200, response.text
        status: dict[str, Any] = response.json()
        memories = next((v for v in status["versions"] if v["index"] in answer["builds"]
                         and v["kind"] == "memories"), None)  # fmt: skip
        if memories is None:  # the worker has not made it yet
            return None
        if (progress := memories["progress"]) is not None:
            seen.append((status["active"], progress["stage"], progress["kind"], progress["done"]))
        stages = {v["progress"]["stage"] for v in status["versions"]
                  if v["state"] == "in use" and v["progress"]}  # fmt: skip
        # the aliases move, then the progress says so (a GET may fall between the two)
        return status if memories["state"] == "in use" and stages == {"switched"} else None

    status = wait_until(switched, "the build to be switched in", 120)
    synced = [done for _, stage, kind, done in seen if (stage, kind) == ("sync", "memories")]
    assert len(set(synced)) >= 2, seen  # the progress moved while it ran
    assert any(active for active, *_ in seen), seen
    assert status["embedder"]["model"] == "new-embedder"
    for version in status["versions"]:
        if version["state"] == "in use":
            progress = version["progress"]
            assert progress["stage"] == "switched" and progress["mode"] == "reembed", version
            assert progress["updated_at"] >= progress["started_at"]
    assert wait_until(lambda: stack.admin.get(url).json()["active"] is False or None,
                      "the lock to be let go", 30)  # fmt: skip
    text, memory_id = next(iter(seeded.items()))
    assert top_hit(stack.tenant, text) == memory_id


def test_a_worker_killed_mid_run_leaves_a_stopped_progress_and_a_resumable_build(
    stack: Stack,
) -> None:
    seed(stack.tenant, 60)
    url = "/v1/admin/reprocess"
    started = stack.admin.post(url, json=reembed_body(stack, rate=10))
    assert started.status_code == 202, started.text

    def memories_build() -> dict[str, Any] | None:
        return builds_of(stack.admin.get(url).json()).get("memories")

    def a_third_done() -> dict[str, Any] | None:
        build = memories_build()
        progress = build and build["progress"]
        return build if progress and progress["done"] >= 20 else None

    wait_until(a_third_done, "the build to be a third done", 60)
    stack.worker.kill()  # SIGKILL: no warm shutdown, nothing recorded on the way out

    def stopped() -> dict[str, Any] | None:
        status: dict[str, Any] = stack.admin.get(url).json()
        return None if status["active"] else status

    status = wait_until(stopped, "the dead worker's lock to lapse", 40)
    build = builds_of(status)["memories"]
    assert build["progress"]["stage"] == "sync" and build["documents"] < 60, build
    time.sleep(2.5)  # longer than a running writer's interval: the progress has stopped
    assert memories_build() == build
    again = stack.admin.post(url, json=reembed_body(stack))
    assert again.status_code == 202, again.text  # the lock is free: a new run may start

    stack.new.reset()
    stack.worker.start()  # the new run waited in the queue for a worker; it resumes the build
    stack.worker.wait_ready(stack.app)

    def switched() -> dict[str, Any] | None:
        status: dict[str, Any] = stack.admin.get(url).json()
        in_use = [v for v in status["versions"] if v["state"] == "in use"]
        done = all(v["progress"] and v["progress"]["stage"] == "switched" for v in in_use)
        return status if done and not status["active"] else None

    status = wait_until(switched, "the resumed run to switch", 120)
    assert status["embedder"]["model"] == "new-embedder"
    documents = sum(v["documents"] for v in status["versions"] if v["state"] == "in use")
    embedded = sum(len(body["input"]) for path, body in stack.new.requests
                   if path.endswith("embeddings"))  # fmt: skip
    assert 0 < embedded <= documents - 20, (embedded, documents)  # what the first run held


def test_a_run_that_fails_records_why_and_lets_the_lock_go(stack: Stack) -> None:
    seed(stack.tenant, 5)
    url = "/v1/admin/reprocess"
    gone = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    body = {"mode": "reembed", "embedder": {"model": "gone", "dims": NEW_DIMS, "base_url": gone}}
    started = stack.admin.post(url, json=body)
    assert started.status_code == 202, started.text

    def failed() -> dict[str, Any] | None:
        status: dict[str, Any] = stack.admin.get(url).json()
        build = builds_of(status).get("memories")
        progress = build and build["progress"]
        ended = progress and progress["stage"] == "failed" and not status["active"]
        return progress if ended else None

    progress = wait_until(failed, "the run to fail", 60)
    assert progress["reason"] and progress["kind"] == "memories", progress


def test_the_named_locks_hold_one_owner_renew_for_it_alone_and_lapse(
    redis_client: redis.Redis,
) -> None:
    states = RedisStateStore(redis_client, f"memqtest-lock-{uuid.uuid4().hex[:6]}")
    assert states.take_lock("reprocess", "a", 5) and not states.take_lock("reprocess", "b", 5)
    assert states.renew_lock("reprocess", "a", 0.3) and not states.renew_lock("reprocess", "b", 5)
    states.end_lock("reprocess", "b")  # not b's: kept
    assert states.lock_owner("reprocess") == "a"
    time.sleep(0.5)  # a's renewal was for 0.3 s
    assert states.lock_owner("reprocess") is None and states.take_lock("reprocess", "b", 5)
    states.end_lock("reprocess", "b")
    assert states.lock_owner("reprocess") is None
