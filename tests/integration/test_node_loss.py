"""A data node SIGKILLed mid-ingestion costs nothing: on a private 3-node cluster started by
``ops/cluster`` (every index with 3 shards and 1 replica), memq given all three node URLs, a
real worker and a real API, conversations posted through the API before and during the loss
all end ``succeeded``, each fact stored exactly once; searches keep answering while the node
is gone; ``ops/cluster up`` brings the node back and the cluster to green.

The killed node is the first of memq's URL list, so every client meets it first and must
carry on to the next node. The model is the scripted one (tests/fakellm.py), embeddings too.
Marked ``cluster``: starting three nodes takes minutes on a small machine."""

from __future__ import annotations

import os
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames, Kind, drop_indices, ensure_indices
from tests.conftest import admin_key, running
from tests.fakellm import FakeLLMServer
from tests.integration.test_pipeline import facts_from_conversation
from tests.private_services import PrivateCluster, private_memq_env
from tests.processes import ApiProcess, WorkerProcess, free_port
from workers.app import create_celery

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

KILLED = 1  # the first URL of memq's list
SESSIONS = 8
# per session: posted before the kill (enough that a session's line outlasts the first job),
# and while the node is down
JOBS_BEFORE, JOBS_DURING = 10, 2
FACTS_PER_JOB = 2
TERMINAL = {"succeeded", "failed", "dead"}
SETTLE_S = 240.0  # from the kill to every job terminal
GREEN_S = 240.0  # from the node's restart to a green cluster


@dataclass
class ClusterStack:
    cluster: PrivateCluster
    es: Elasticsearch
    names: IndexNames
    api: httpx.Client
    worker: WorkerProcess


def settings_of(env: dict[str, str], patch: pytest.MonkeyPatch) -> Settings:
    """The Settings a memq process started with ``env`` builds."""
    with patch.context() as scoped:
        for key in [k for k in os.environ if k.startswith("MEMQ_")]:
            scoped.delenv(key)
        for key, value in env.items():
            if key.startswith("MEMQ_"):
                scoped.setenv(key, value)
        return Settings()


@pytest.fixture(scope="module")
def cluster(test_env: dict[str, str]) -> Iterator[PrivateCluster]:
    private = PrivateCluster(test_env)
    try:
        private.up()
        yield private
    finally:
        private.remove()


@pytest.fixture(scope="module")
def stack(
    test_env: dict[str, str],
    cluster: PrivateCluster,
    monkeypatch_session: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ClusterStack]:
    """memq on the cluster: all three URLs, 3 shards and 1 replica per index, private indices
    (``clusterops-*``), queues and model; a worker and an API of this checkout."""
    tag = uuid.uuid4().hex[:8]
    logs: Path = tmp_path_factory.mktemp("node-loss")
    with FakeLLMServer() as model:
        model.responder = facts_from_conversation
        env = private_memq_env(test_env, tag, model.base_url) | {
            "MEMQ_ES_URL": ",".join(cluster.urls),
            "MEMQ_ES_SHARDS": "3",
            "MEMQ_ES_REPLICAS": "1",
            "MEMQ_API_PORT": str(free_port()),
            "MEMQ_API_ADMIN_KEY": admin_key(),
        }
        settings = settings_of(env, monkeypatch_session)
        es = make_client(settings.es)
        names = ensure_indices(es, settings.es, settings.embedder.dims)
        app = create_celery(settings)
        worker = WorkerProcess(env, logs / "worker.log")
        api = ApiProcess(env, logs / "api.log")
        try:
            with (
                running(worker, lambda: worker.wait_ready(app, timeout_s=120)),
                running(api, api.wait_ready),
                httpx.Client(base_url=api.url, timeout=60) as http,
            ):
                yield ClusterStack(cluster, es, names, http, worker)
        finally:
            app.close()
            drop_indices(es, names)


@dataclass
class Searches:
    """Searches sent through the API in a loop while the node is gone."""

    answered: list[float] = field(default_factory=list)  # seconds each took
    partial: int = 0  # answers flagged partial (some shard could not answer)
    failed: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def tenant_client(stack: ClusterStack, tenant: str) -> httpx.Client:
    """An API client with a new key of ``tenant``."""
    admin = {"Authorization": f"Bearer {admin_key()}"}
    body = {"tenant": tenant, "name": "node loss"}
    created = stack.api.post("/v1/admin/keys", json=body, headers=admin)
    assert created.status_code == 201, created.text
    key = created.json()["key"]
    return httpx.Client(
        base_url=stack.api.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )


def post_jobs(http: httpx.Client, round_: str, jobs_per_session: int) -> list[str]:
    """Conversations of every session (FACTS_PER_JOB facts each); their job ids."""
    ids = []
    for job in range(jobs_per_session):
        for session in range(SESSIONS):
            facts = [f"fact: u{session} {round_} job {job} thing {n}" for n in range(FACTS_PER_JOB)]
            body = {"messages": "\n".join(facts), "user_id": f"u{session}"}
            response = http.post("/v1/memories", json=body)
            assert response.status_code == 202, response.text
            ids.append(response.json()["job_id"])
    return ids


def statuses(http: httpx.Client, jobs: list[str]) -> Counter[str]:
    found = Counter[str]()
    for job in jobs:
        response = http.get(f"/v1/jobs/{job}")
        found[response.json()["status"] if response.status_code == 200 else "unreadable"] += 1
    return found


def ended_after(http: httpx.Client, jobs: list[str], when: datetime) -> int:
    """How many of ``jobs`` ended after ``when``."""
    ended = [http.get(f"/v1/jobs/{job}").json().get("finished_at") for job in jobs]
    return sum(datetime.fromisoformat(at) > when for at in ended if at)


def wait_terminal(http: httpx.Client, jobs: list[str], timeout_s: float) -> Counter[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        now = statuses(http, jobs)
        if set(now) <= TERMINAL or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def search_loop(http: httpx.Client, searches: Searches) -> None:
    session = 0
    while not searches.stop.is_set():
        body = {"query": "thing", "user_id": f"u{session % SESSIONS}", "top_k": 5}
        began = time.monotonic()
        try:
            response = http.post("/v1/memories/search", json=body)
        except httpx.HTTPError as exc:
            searches.failed.append(repr(exc))
        else:
            if response.status_code == 200:
                searches.answered.append(time.monotonic() - began)
                searches.partial += response.json()["partial"] is True
            else:
                searches.failed.append(f"{response.status_code} {response.text[:200]}")
        session += 1
        time.sleep(0.2)


def stored_memories(stack: ClusterStack, tenant: str) -> list[dict[str, Any]]:
    index = stack.names.alias(Kind.MEMORIES)
    stack.es.indices.refresh(index=index)
    hits = stack.es.search(
        index=index,
        query={"term": {"tenant": tenant}},
        size=10_000,
        source_includes=["hash", "user_id"],
    )["hits"]["hits"]
    return [{"id": hit["_id"], **hit["_source"]} for hit in hits]


def health(es: Elasticsearch, **wait: Any) -> dict[str, Any]:
    answer: dict[str, Any] = es.options(ignore_status=408).cluster.health(**wait).body
    return answer


def test_a_data_node_killed_mid_ingestion_loses_nothing_and_the_cluster_heals(
    stack: ClusterStack, capsys: pytest.CaptureFixture[str]
) -> None:
    tenant = f"nodeloss-{uuid.uuid4().hex[:8]}"
    with tenant_client(stack, tenant) as http:
        node_loss(stack, tenant, http, capsys)


def node_loss(
    stack: ClusterStack, tenant: str, http: httpx.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Post, kill node KILLED, post more and search meanwhile, bring it back, then check."""
    before = post_jobs(http, "before", JOBS_BEFORE)
    deadline = time.monotonic() + 120
    while "succeeded" not in (seen := statuses(http, before[:SESSIONS])):
        assert time.monotonic() < deadline, seen
        time.sleep(0.05)

    stack.cluster.kill(KILLED)  # mid-ingestion: some jobs done, the rest running or queued
    killed_at, killed_wall = time.monotonic(), datetime.now(UTC)
    searches = Searches()
    searcher = threading.Thread(target=search_loop, args=(http, searches), daemon=True)
    searcher.start()
    during = post_jobs(http, "during", JOBS_DURING)
    settled = wait_terminal(http, before + during, SETTLE_S)
    settled_s = time.monotonic() - killed_at
    searches.stop.set()
    searcher.join(timeout=60)
    yellow = health(stack.es)

    restart_s = stack.cluster.up(KILLED)
    green = health(stack.es, wait_for_status="green", wait_for_nodes="3", timeout=f"{GREEN_S:.0f}s")
    green_s = time.monotonic() - killed_at - settled_s
    # jobs posted before the kill that ended after it (read once the node is back: reads
    # through the API while it is gone are slow enough for every job to end meanwhile)
    late = ended_after(http, before, killed_wall)

    with capsys.disabled():
        p95 = statistics.quantiles(searches.answered, n=20)[-1] if len(searches.answered) > 1 else 0
        print(
            f"\nnode loss: {len(before)} jobs posted before the kill ({late} ended after "
            "it), "
            f"{len(during)} while node {KILLED} was down; all terminal {settled_s:.1f} s after "
            f"the kill ({settled}); cluster {yellow['status']} with "
            f"{yellow['number_of_nodes']} nodes meanwhile; {len(searches.answered)} searches "
            f"answered (p95 {p95 * 1000:.0f} ms, {searches.partial} flagged partial), "
            f"{len(searches.failed)} failed; node back "
            f"in {restart_s:.0f} s, cluster {green['status']} {green_s:.0f} s after the jobs "
            "settled"
        )

    assert late, "every job posted before the kill ended before it"
    assert settled == Counter({"succeeded": len(before) + len(during)}), (
        settled,
        stack.worker.tail(),
    )
    assert searches.answered and not searches.failed, searches.failed[:5]
    assert green["status"] == "green" and green["number_of_nodes"] == 3, green

    stored = stored_memories(stack, tenant)
    assert len(stored) == FACTS_PER_JOB * (len(before) + len(during))  # nothing lost
    assert len({m["id"] for m in stored}) == len(stored)  # no id stored twice (on two shards)
    assert len({(m["user_id"], m["hash"]) for m in stored}) == len(stored)  # no fact twice
