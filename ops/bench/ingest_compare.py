"""Ingestion cost, memq against mem0 OSS (mem0ai 2.2.1), LLM extraction on for both.

Same machine, same Elasticsearch node (separate indices), the same embedder and the same model:
- embeddings: memq's local MiniLM served from this process as ONE OpenAI-compatible
  `POST /v1/embeddings` (mem0_compare's endpoint), called by memq's workers
  (MEMQ_EMBEDDER_KIND=openai) and by mem0 alike, so calls are counted for both;
- LLM: tests/fakellm's scripted server, answering at once; it tells memq's extraction prompt
  from mem0's additive-extraction prompt by their instructions (both ask for the same
  `{"memory": [{"text", "attributed_to"}]}`) and answers with one fact per user line (at most 3)
  of the new messages;
- Elasticsearch: both through a counting HTTP proxy on 127.0.0.1 (keep-alive upstream), so
  requests are counted for both and the proxy hop is paid by both.

Modes, alternated per round: memq-1w (one `--role io` + one `--role cpu` worker, as ops/ runs
them), mem0-seq (`Memory.add`, one after another), memq-2w (the same plus a second `--role cpu`
worker), mem0-async (`AsyncMemory.add`, asyncio.gather under a semaphore of 8). memq's wall time
runs from the first `intake.submit` to every job record terminal and the memories index
refreshed; mem0's from the first add to the last one returned and its index refreshed. Needs
the stack (ops/up); starts its own workers on private queues and index prefixes.

With ``--baseline DIR`` (a checkout of an earlier memq, e.g. a ``git worktree`` of another
commit), a "baseline-1w" mode runs that code in the same run: its workers and its intake run in
processes started in DIR with DIR first on PYTHONPATH (same virtualenv, same services, same
counters), the intake process importing everything before the clock starts.

With ``--model realistic`` the scripted model behaves as a hosted one under load (its
``ProviderModel``): each answer takes a lognormal time, median 1 s and p95 3 s (mean 1.25 s), and
a request beyond 16 in flight is answered 429 with ``Retry-After: 1``. The provider's ceiling is
then 16 / 1.25 s = 12.8 conversations/s; mem0-async runs under a semaphore of 16, and what mem0
raises to its caller is counted per exception type. Every mode of a round draws the same
latencies in the same order (the model's generator is seeded with the round's number before
each run), so the spread between modes of one round is theirs, not the draws'. ``--via api``
POSTs memq's conversations to a memq API process (8 clients at once, as a chat platform's
webhooks would) instead of calling ``intake.submit`` in this process: the users' path, API hop
included.

    .venv/bin/python ops/bench/ingest_compare.py [--conversations 200] [--users 20] [--rounds 1]
        [--baseline DIR] [--model instant|realistic] [--via intake|api]
        [--modes memq-1w,mem0-seq,memq-2w,mem0-async]
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import http.client
import json
import multiprocessing
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
from backfill_throughput import (  # also puts the repository root on sys.path
    start_workers,
    where_time_went,
)
from elasticsearch import Elasticsearch
from mem0_compare import Endpoints, EndpointServer, handler_for, mem0_config

from pipeline.config import EmbedderConfig, Settings
from pipeline.embedding.local import MiniLMEmbedder
from pipeline.jobs import TERMINAL_STATUSES, JobStatus
from pipeline.models import AddRequest, MessageIn, Scope
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames, drop_indices
from tests.fakellm import FakeLLMServer, ProviderModel
from workers.app import MemqCelery, create_celery
from workers.intake import submit

ES_UPSTREAM = ("127.0.0.1", 9200)
STATS_PATH = "/stats"
TENANT = "ingestbench"
MEMQ_MARK = "You maintain the long-term memory"  # pipeline/prompts/extract_user_v1.txt
MEM0_MARK = "You are a Memory Extractor"  # mem0.configs.prompts.ADDITIVE_EXTRACTION_PROMPT
TERMINAL = TERMINAL_STATUSES
MAX_FACTS = 3

# --- conversations ---------------------------------------------------------------------------

CITIES = ["Lisbon", "Porto", "Lyon", "Ghent", "Turin", "Bilbao", "Krakow"]
JOBS = ["nurse", "data analyst", "carpenter", "teacher", "sound engineer"]
PEOPLE = ["Marta", "Jonas", "Aisha", "Tom", "Inés", "Kenji", "Priya", "Luca", "Sofia", "Omar"]
TOPICS = ["bouldering", "jazz piano", "pottery", "chess", "sailing", "sourdough", "cycling"]
PETS = ["beagle", "tabby cat", "rescue greyhound", "parrot", "corgi"]
FOODS = ["peanuts", "shellfish", "gluten", "lactose", "sesame", "kiwi"]
BOOKS = ["Middlemarch", "Dune", "The Overstory", "Piranesi", "Stoner", "Beloved", "Solaris"]

# (user line, assistant reply) pairs; {i} keeps every conversation's lines its own.
PAIRS = [
    (
        "I moved to {city} in March for a job as a {job}, flat number {i}.",
        "Congratulations on the move! How are you settling in?",
    ),
    (
        "My sister {person} visits on the {day}th and she is really into {topic}.",
        "Lovely. Do you have plans for her visit?",
    ),
    (
        "I've taken up {topic} again, every Saturday at {hour} in the morning.",
        "That's a great routine. What got you back into it?",
    ),
    (
        "Heads up: I'm allergic to {food}, keep that in mind for recipe {i}.",
        "Noted, I'll avoid {food} in anything I suggest.",
    ),
    (
        "We adopted a {pet} called {person} Junior {i} weeks ago.",
        "How fun! How is the {pet} adjusting?",
    ),
    (
        "I'm rereading {book} for my book club, we meet on the {day}th.",
        "Great choice. What do you think of it this time?",
    ),
    (
        "I'm training for a half marathon in {city}, aiming for 1:{minutes} this time.",
        "Good luck! How many kilometres a week are you running?",
    ),
    (
        "At work as a {job} I'm leading project {i} until the end of the quarter.",
        "That sounds demanding. How is the team?",
    ),
]


@dataclass(frozen=True)
class Conversation:
    id: str
    user: str
    timestamp: datetime
    messages: list[dict[str, str]]


def slots(i: int) -> dict[str, Any]:
    return {
        "i": i,
        "city": CITIES[i % len(CITIES)],
        "job": JOBS[i % len(JOBS)],
        "person": PEOPLE[i % len(PEOPLE)],
        "topic": TOPICS[i % len(TOPICS)],
        "pet": PETS[i % len(PETS)],
        "food": FOODS[i % len(FOODS)],
        "book": BOOKS[i % len(BOOKS)],
        "day": 1 + i % 28,
        "hour": 6 + i % 5,
        "minutes": 40 + i % 20,
    }


def conversation(i: int, users: int, start: datetime) -> Conversation:
    """4 to 8 turns, user first, drawn from the templates at an offset of its own."""
    turns = 4 + i % 5
    values = slots(i)
    messages: list[dict[str, str]] = []
    for k in range(turns):
        user_line, reply = PAIRS[(i + k // 2) % len(PAIRS)]
        role, text = ("user", user_line) if k % 2 == 0 else ("assistant", reply)
        messages.append({"role": role, "content": text.format(**values)})
    stamp = start + timedelta(hours=7 * i)
    return Conversation(f"c{i}", f"user{i % users}", stamp, messages)


def conversations(count: int, users: int = 20) -> list[Conversation]:
    start = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
    return [conversation(i, users, start) for i in range(count)]


# --- the scripted LLM: one responder for both systems' prompts -------------------------------


@dataclass
class Responder:
    """Answers memq's and mem0's extraction prompts; counts which prompt it got."""

    kinds: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: dict[str, Any]) -> str:
        text = "\n".join(str(m.get("content", "")) for m in request["messages"])
        # The last marker: each system prompt also names the section in its instructions.
        if MEM0_MARK in text:
            kind, new = "mem0", text.rpartition("## New Messages")[2].split("## Observation")[0]
        elif MEMQ_MARK in text:
            kind, new = "memq", text.rpartition("New messages:")[2]
        else:
            kind, new = "unknown", ""
        with self.lock:
            self.kinds[kind] += 1
        return json.dumps({"memory": facts(new)})


def facts(new_messages: str) -> list[dict[str, str]]:
    """One fact per user line (at most MAX_FACTS); the shape both prompts ask for."""
    said = re.findall(r"^user[^:\n]*: (.+)$", new_messages, flags=re.MULTILINE)[:MAX_FACTS]
    return [{"text": f"The user said: {line.strip()}", "attributed_to": "user"} for line in said]


# --- the counting Elasticsearch proxy --------------------------------------------------------

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def request_kind(method: str, path: str) -> str:
    """`POST /<index>/_search`: the method and the path with names left out."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    return " ".join([method, "/" + "/".join(p if p.startswith("_") else "<x>" for p in parts)])


class CountingProxy(EndpointServer):
    """Forwards every request to Elasticsearch over per-thread keep-alive connections (with
    the endpoints' listen backlog: a batch's clients connect at once)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.requests: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.local = threading.local()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def count(self) -> Counter[str]:
        with self.lock:
            return self.requests.copy()

    def forward(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        with self.lock:
            self.requests[request_kind(method, path)] += 1
        for attempt in (1, 2):  # a keep-alive connection Elasticsearch closed: reconnect once
            conn = self.connection(fresh=attempt == 2)
            try:
                conn.request(method, path, body=body, headers=headers)
                reply = conn.getresponse()
                return reply.status, reply.getheaders(), reply.read()
            except (http.client.HTTPException, OSError):
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def connection(self, fresh: bool) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self.local, "conn", None)
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            conn = http.client.HTTPConnection(*ES_UPSTREAM, timeout=120)
            self.local.conn = conn
        return conn


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive towards the clients too
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm against
    # the client's delayed ACK held every reply ~40 ms.
    disable_nagle_algorithm = True
    server: CountingProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def relay(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        status, reply_headers, data = self.server.forward(self.command, self.path, body, headers)
        self.send_response(status)
        for key, value in reply_headers:
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == STATS_PATH:  # the proxy's own counts, not forwarded and not counted
            data = json.dumps(dict(self.server.count())).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.relay()

    def do_POST(self) -> None:
        self.relay()

    def do_PUT(self) -> None:
        self.relay()

    def do_DELETE(self) -> None:
        self.relay()

    def do_HEAD(self) -> None:
        self.relay()


class Sidecar:
    """One of the benchmark's own servers, run in a child process with an interpreter lock of
    its own: serving embeddings and proxying Elasticsearch for a concurrent system must not
    queue on the lock of the process that runs mem0 and submits memq's jobs. Its counters are
    read over HTTP (`GET /stats`)."""

    def __init__(self, build: Callable[[], ThreadingHTTPServer]) -> None:
        context = multiprocessing.get_context("fork")  # `build` runs in the child, unpickled
        ports = context.SimpleQueue()
        self.process = context.Process(target=serve_child, args=(build, ports), daemon=True)
        self.process.start()
        self.url = f"http://127.0.0.1:{ports.get()}"

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}{STATS_PATH}", timeout=30) as reply:
            stats: dict[str, Any] = json.load(reply)
        return stats

    def close(self) -> None:
        self.process.terminate()
        self.process.join(timeout=10)


def serve_child(build: Callable[[], ThreadingHTTPServer], ports: Any) -> None:
    server = build()
    ports.put(server.server_address[1])
    server.serve_forever()


def embeddings_server() -> ThreadingHTTPServer:
    """mem0_compare's endpoint over memq's local MiniLM, loaded in the process that serves it."""
    endpoints = Endpoints(MiniLMEmbedder(EmbedderConfig()), turns=0)
    return EndpointServer(("127.0.0.1", 0), handler_for(endpoints))


# --- shared bench context and results --------------------------------------------------------


@dataclass
class Bench:
    convs: list[Conversation]
    es_url: str  # what both systems are given: the counting proxy
    es_requests: Callable[[], Counter[str]]
    embed_work: Callable[[], dict[str, float]]  # the endpoint's counters (Endpoints.stats)
    embed_url: str
    llm: FakeLLMServer
    responder: Responder
    es: Elasticsearch  # direct, not counted: setup, polling, counting, cleanup
    workdir: Path
    via_api: bool = False  # memq's conversations are POSTed to its API instead of submitted
    memq_settings: dict[str, str] = field(default_factory=dict)  # MEMQ_* for memq's processes
    mem0_concurrency: int = 8

    def embed_calls(self) -> int:
        return int(self.embed_work()["embed_calls"])

    def counters(self) -> tuple[int, int, Counter[str], int]:
        llm = self.llm
        return len(llm.chat_requests()), self.embed_calls(), self.es_requests(), llm.refused


@dataclass
class Result:
    mode: str
    seconds: float
    llm_calls: int
    embed_calls: int
    es_requests: int
    memories: int
    failed: int
    es_kinds: Counter[str]
    refused: int = 0  # chat requests the provider model answered 429


def measure(bench: Bench, mode: str, work: Callable[[], tuple[int, int]]) -> Result:
    """Time `work` (it returns memories stored, jobs failed) and count what it cost."""
    before = bench.counters()
    started = time.perf_counter()
    memories, failed = work()
    seconds = time.perf_counter() - started
    after = bench.counters()
    kinds = after[2] - before[2]
    llm, embed, refused = after[0] - before[0], after[1] - before[1], after[3] - before[3]
    return Result(mode, seconds, llm, embed, kinds.total(), memories, failed, kinds, refused)


# --- memq ------------------------------------------------------------------------------------


def memq_env(
    bench: Bench, run: str, prefix: str | None = None, baseline: Path | None = None
) -> dict[str, str]:
    code = {"PYTHONPATH": str(baseline)} if baseline else {}
    return {
        **os.environ,
        **code,
        "MEMQ_ES_URL": bench.es_url,
        "MEMQ_ES_INDEX_PREFIX": prefix or f"memqbench-ingest-{run}",
        "MEMQ_LLM_BASE_URL": bench.llm.base_url,
        "MEMQ_LLM_MODEL": "scripted",
        "MEMQ_EMBEDDER_KIND": "openai",
        "MEMQ_EMBEDDER_BASE_URL": bench.embed_url,
        "MEMQ_EMBEDDER_MODEL": "all-MiniLM-L6-v2",
        "MEMQ_EMBEDDER_DIMS": "384",
        **{
            f"MEMQ_QUEUES_{q.upper()}": f"bench-ingest-{run}.{q}" for q in ("io", "cpu", "backfill")
        },
        **bench.memq_settings,
    }


def add_cpu_worker(env: dict[str, str], logs: Path, app: MemqCelery, run: str) -> Any:
    """A second `--role cpu` worker, waited for by name (the health task answers from any)."""
    name = f"memq-cpu2-{run}@bench"
    worker = subprocess.Popen(
        [sys.executable, "-m", "memq.cli", "worker", "--role=cpu", f"--hostname={name}"],
        env=env,
        stdout=(logs / "worker-cpu2.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not app.control.ping(destination=[name], timeout=1.0):
        if time.monotonic() > deadline:
            raise SystemExit("ingest_compare: the second CPU worker did not answer")
    return worker


@contextmanager
def memq_workers(
    env: dict[str, str],
    logs: Path,
    app: MemqCelery,
    run: str,
    cpu: int,
    *,
    baseline: Path | None = None,
) -> Any:
    workers = start_workers(env, logs, baseline)
    try:
        if cpu == 2:
            workers.append(add_cpu_worker(env, logs, app, run))
        yield
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=60)


def settle(bench: Bench, quiet_s: float = 1.5, timeout_s: float = 60) -> None:
    """Wait for the workers' warm-up embeddings (one per process, after fork) to be over."""
    deadline = time.monotonic() + timeout_s
    seen, since = bench.embed_calls(), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        time.sleep(0.1)
        if bench.embed_calls() != seen:
            seen, since = bench.embed_calls(), time.monotonic()


def request_for(conv: Conversation, tenant: str = TENANT) -> AddRequest:
    return AddRequest(
        scope=Scope(tenant=tenant, user_id=conv.user),
        messages=[MessageIn.model_validate(m) for m in conv.messages],
        metadata={"conversation": conv.id},
        timestamp=conv.timestamp,
        infer=True,
    )


def wait_terminal(
    es: Elasticsearch, names: IndexNames, job_ids: list[str], timeout_s: float
) -> int:
    """Poll the job records (direct client) until all are terminal; returns how many failed.
    A realtime mget of the records by id, as a client polling ``GET /v1/jobs/{id}`` reads
    them: no refresh of the jobs index, which would cost Elasticsearch work no user causes."""
    deadline = time.monotonic() + timeout_s
    pending, failed = list(dict.fromkeys(job_ids)), 0
    while time.monotonic() < deadline:
        docs = es.mget(index=names.jobs, ids=pending, source_includes=["status"])["docs"]
        status = {d["_id"]: d["_source"]["status"] for d in docs if d.get("found")}
        failed += sum(1 for s in status.values() if s in (JobStatus.FAILED, JobStatus.DEAD))
        pending = [job for job in pending if status.get(job) not in TERMINAL]
        if not pending:
            return failed
        time.sleep(0.25)
    raise SystemExit(f"ingest_compare: jobs not terminal after {timeout_s:.0f}s")


def stored(es: Elasticsearch, index: str) -> int:
    return int(es.count(index=index)["count"])


@contextmanager
def memq_app(
    bench: Bench, cpu_workers: int, prefix: str | None = None, baseline: Path | None = None
) -> Iterator[MemqCelery]:
    """memq's workers on private queues, up and settled; the app to submit to. They write under
    ``prefix``, or under a private prefix whose indices are dropped at the end. With
    ``baseline``, the workers run that source tree's code."""
    run = uuid.uuid4().hex[:6]
    env = memq_env(bench, run, prefix, baseline)
    with mock.patch.dict(os.environ, env):
        settings = Settings()
    app = create_celery(settings)
    # the indices are created before anything is counted, by the code that writes them: this
    # tree's here, the baseline's by its intake (its mappings may differ)
    names = IndexNames(settings.es.index_prefix) if baseline else app.runtime.store.names
    logs = bench.workdir / f"memq-{run}"
    logs.mkdir()
    try:
        with (
            memq_workers(env, logs, app, run, cpu_workers, baseline=baseline),
            memq_api(env, logs, bench.via_api) as api,
        ):
            settle(bench)
            app.conf.update(memq_bench_env=env, memq_bench_api=api)
            yield app
    finally:
        if prefix is None:
            drop_indices(bench.es, names)
        drop_redis(settings, f"memq:{settings.es.index_prefix}:*", f"*bench-ingest-{run}.*")


@contextmanager
def memq_api(env: dict[str, str], logs: Path, wanted: bool) -> Iterator[tuple[str, str] | None]:
    """With ``wanted``: memq's API on the run's settings, as ops/ runs it, and a key of the
    benchmark's tenant; yields (url, key). Otherwise nothing is started."""
    if not wanted:
        yield None
        return
    port, admin = str(free_port()), uuid.uuid4().hex * 2
    api_env = {**env, "MEMQ_API_PORT": port, "MEMQ_API_ADMIN_KEY": admin}
    api = subprocess.Popen(
        [sys.executable, "-m", "memq.cli", "api"],
        env=api_env,
        stdout=(logs / "api.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/healthz", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if api.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"ingest_compare: the API did not start; see {logs}") from None
                time.sleep(0.5)
        created = httpx.post(
            f"{url}/v1/admin/keys",
            json={"tenant": TENANT, "name": "ingest-bench"},
            headers={"Authorization": f"Bearer {admin}"},
            timeout=30,
        )
        created.raise_for_status()
        yield url, str(created.json()["key"])
    finally:
        os.killpg(api.pid, signal.SIGTERM)
        api.wait(timeout=60)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api_body(conv: Conversation) -> dict[str, Any]:
    """What a chat platform POSTs to /v1/memories for ``conv``."""
    return {
        "messages": conv.messages,
        "user_id": conv.user,
        "metadata": {"conversation": conv.id},
        "timestamp": conv.timestamp.isoformat(),
    }


def post_all(api: tuple[str, str], convs: list[Conversation], clients: int = 8) -> list[str]:
    """POST every conversation, ``clients`` at a time (a platform's webhook fan-out); returns
    the job ids the API answered with."""
    url, key = api
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as http:

        def post(conv: Conversation) -> str:
            answer = http.post("/v1/memories", json=api_body(conv), timeout=60)
            if answer.status_code != 202:
                raise SystemExit(f"ingest_compare: POST answered {answer.status_code}")
            return str(answer.json()["job_id"])

        with ThreadPoolExecutor(max_workers=clients) as pool:
            return list(pool.map(post, convs))


def memq_ingest(
    bench: Bench, app: MemqCelery, mode: str, tenant: str = TENANT, batch: str | None = None
) -> Result:
    """Submit (or POST) every conversation, then wait for every job record to be terminal."""
    names = app.runtime.store.names
    before = stored(bench.es, names.memories)
    api = app.conf.get("memq_bench_api")

    def work() -> tuple[int, int]:
        if api is not None and tenant == TENANT and batch is None:
            jobs = post_all(api, bench.convs)
        else:
            jobs = [
                submit(app, request_for(conv, tenant), batch_id=batch).record.job_id
                for conv in bench.convs
            ]
        failed = wait_terminal(bench.es, names, jobs, timeout_s=900)
        bench.es.indices.refresh(index=names.memories)
        return stored(bench.es, names.memories) - before, failed

    result = measure(bench, mode, work)
    print(f"  {mode}: {where_time_went(bench.es, names, tenant)}")
    return result


def memq_run(bench: Bench, cpu_workers: int) -> Result:
    with memq_app(bench, cpu_workers) as app:
        return memq_ingest(bench, app, f"memq-{cpu_workers}w")


BASELINE_INTAKE = """
import json, sys
from pipeline.config import Settings
from pipeline.models import AddRequest
from workers.app import create_celery
from workers.intake import submit
app = create_celery(Settings())
requests = [AddRequest.model_validate(r) for r in json.loads(sys.stdin.readline())]
app.runtime.store
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps([submit(app, request).record.job_id for request in requests]), flush=True)
"""


def baseline_run(bench: Bench, baseline: Path) -> Result:
    """The same work for the code in ``baseline``: its workers, and its intake in a process
    of its own (everything imported and connected before the clock starts)."""
    with memq_app(bench, 1, baseline=baseline) as app:
        names = IndexNames(app.runtime.settings.es.index_prefix)  # created by the intake below
        env = app.conf.memq_bench_env
        intake = subprocess.Popen(
            [sys.executable, "-c", BASELINE_INTAKE],
            env=env,
            cwd=baseline,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert intake.stdin is not None and intake.stdout is not None
        requests = [request_for(conv).model_dump(mode="json") for conv in bench.convs]
        intake.stdin.write(json.dumps(requests) + "\n")
        intake.stdin.flush()
        if intake.stdout.readline().strip() != "ready":
            raise SystemExit("ingest_compare: the baseline intake did not start")
        before = stored(bench.es, names.memories)

        def work() -> tuple[int, int]:
            assert intake.stdin is not None and intake.stdout is not None
            intake.stdin.write("go\n")
            intake.stdin.flush()
            jobs = json.loads(intake.stdout.readline())
            failed = wait_terminal(bench.es, names, jobs, timeout_s=900)
            bench.es.indices.refresh(index=names.memories)
            return stored(bench.es, names.memories) - before, failed

        result = measure(bench, "baseline-1w", work)
        intake.wait(timeout=60)
        return result


def drop_redis(settings: Settings, *patterns: str) -> None:
    """The run's job states, session lines and queues (and kombu's bindings for them)."""
    import redis

    client = redis.Redis.from_url(settings.redis.url)
    for pattern in patterns:
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
    client.close()


# --- mem0 ------------------------------------------------------------------------------------


def mem0_setup(bench: Bench, run: str, index: str | None = None) -> tuple[dict[str, Any], str]:
    """mem0_compare's configuration, on its own history DB for this run and on ``index`` (default:
    an index of its own)."""
    config = mem0_config(bench.es_url, 0, bench.workdir / run)
    index = index or f"mem0bench_ingest_{run}"
    config["vector_store"]["config"]["collection_name"] = index
    config["embedder"]["config"]["openai_base_url"] = bench.embed_url
    config["llm"]["config"].update(model="scripted", openai_base_url=bench.llm.base_url)
    (bench.workdir / run).mkdir()
    return config, index


def mem0_args(conv: Conversation) -> dict[str, Any]:
    """OSS mem0 refuses `timestamp` (platform only): the date rides in metadata."""
    metadata = {"conversation": conv.id, "conversation_date": conv.timestamp.isoformat()}
    return {"messages": conv.messages, "user_id": conv.user, "metadata": metadata}


def mem0_finish(
    bench: Bench, index: str, added: int, before: int = 0, errors: Counter[str] | None = None
) -> tuple[int, int]:
    """Memories stored, and conversations whose add() raised (printed by exception type)."""
    bench.es.indices.refresh(index=index)
    new = stored(bench.es, index) - before
    if new != added:
        print(f"  mem0: add() reported {added} ADD events, the index holds {new} more")
    if errors:
        print(f"  mem0: add() raised {dict(errors)}")
    return new, sum((errors or Counter()).values())


def drop_replica(bench: Bench, index: str) -> None:
    """mem0 creates 5 shards and 1 replica; on one node the replica would stay unassigned."""
    bench.es.indices.put_settings(index=index, settings={"index": {"number_of_replicas": 0}})


@contextmanager
def mem0_memory(bench: Bench, index: str | None = None) -> Iterator[tuple[Any, str]]:
    """mem0's `Memory` and its index: ``index`` if given, else one of its own, dropped after."""
    from mem0 import Memory  # type: ignore[import-untyped]

    config, name = mem0_setup(bench, uuid.uuid4().hex[:6], index)
    memory = Memory.from_config(config)
    drop_replica(bench, name)
    try:
        yield memory, name
    finally:
        memory.close()
        if index is None:
            drop_mem0_indices(bench.es, name)


def mem0_seq(bench: Bench, memory: Any, index: str) -> Result:
    """`Memory.add` for every conversation, one after another."""
    before = stored(bench.es, index)

    def work() -> tuple[int, int]:
        errors: Counter[str] = Counter()
        added = 0
        for conv in bench.convs:
            try:
                added += len(memory.add(**mem0_args(conv))["results"])
            except Exception as exc:  # what mem0 raises to its caller is part of the result
                errors[type(exc).__name__] += 1
        return mem0_finish(bench, index, added, before, errors)

    return measure(bench, "mem0-seq", work)


def mem0_seq_run(bench: Bench) -> Result:
    with mem0_memory(bench) as (memory, index):
        return mem0_seq(bench, memory, index)


def mem0_async_run(bench: Bench) -> Result:
    from mem0 import AsyncMemory

    config, index = mem0_setup(bench, uuid.uuid4().hex[:6])
    memory = AsyncMemory.from_config(config)
    drop_replica(bench, index)

    async def add_all() -> int:
        gate = asyncio.Semaphore(bench.mem0_concurrency)

        async def add(conv: Conversation) -> int:
            async with gate:
                try:
                    return len((await memory.add(**mem0_args(conv)))["results"])
                except Exception as exc:  # what mem0 raises to its caller is part of the result
                    errors[type(exc).__name__] += 1
                    return 0

        return sum(await asyncio.gather(*(add(conv) for conv in bench.convs)))

    errors: Counter[str] = Counter()

    def work() -> tuple[int, int]:
        return mem0_finish(bench, index, asyncio.run(add_all()), 0, errors)

    try:
        return measure(bench, "mem0-async", work)
    finally:
        memory.close()
        drop_mem0_indices(bench.es, index)


def drop_mem0_indices(es: Elasticsearch, index: str) -> None:
    for name in (index, f"{index}_entities"):  # its memories, its entity store
        es.indices.delete(index=name, ignore_unavailable=True)


# --- report ----------------------------------------------------------------------------------


def per_conversation(conversations: int) -> Callable[[Iterator[int]], str]:
    def per_conv(values: Iterator[int]) -> str:
        return f"{statistics.median(values) / conversations:.2f}"

    return per_conv


def table(results: list[Result], conversations: int) -> str:
    lines = [
        "| system / mode | runs | wall s (median) | conversations/s | LLM calls/conv | "
        "embedding calls/conv | ES requests/conv | memories stored | failed jobs | 429s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in dict.fromkeys(r.mode for r in results):
        runs = [r for r in results if r.mode == mode]
        seconds = statistics.median(r.seconds for r in runs)
        per_conv = per_conversation(conversations)
        lines.append(
            f"| {mode} | {len(runs)} | {seconds:.1f} | {conversations / seconds:.2f} | "
            f"{per_conv(r.llm_calls for r in runs)} | {per_conv(r.embed_calls for r in runs)} | "
            f"{per_conv(r.es_requests for r in runs)} | "
            f"{statistics.median(r.memories for r in runs):.0f} | "
            f"{statistics.median(r.failed for r in runs):.0f} | "
            f"{statistics.median(r.refused for r in runs):.0f} |"
        )
    return "\n".join(lines)


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument(
        "--users",
        type=int,
        default=20,
        help="the conversations are spread over this many users, whose own ones run in order",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", type=Path, help="source tree of an earlier memq to compare")
    parser.add_argument(
        "--model",
        choices=("instant", "realistic"),
        default="instant",
        help="realistic: answers take lognormal time (median 1 s, p95 3 s), and more than 16 "
        "requests in flight are answered 429 with Retry-After: 1; mem0-async then runs 16 at once",
    )
    parser.add_argument(
        "--via",
        choices=("intake", "api"),
        default="intake",
        help="api: memq's conversations are POSTed to a memq API process (8 clients at once)",
    )
    parser.add_argument(
        "--modes",
        default="memq-1w,mem0-seq,memq-2w,mem0-async",
        help="comma-separated subset of memq-1w, memq-2w, mem0-seq, mem0-async (in this order)",
    )
    return parser.parse_args(argv)


REALISTIC = ProviderModel(median_s=1.0, p95_s=3.0, limit=16, retry_after_s=1)


def same_draws(bench: Bench, round_no: int) -> None:
    """Reseed the provider model's latencies with the round's number before a run, so every
    run of a round draws the same latencies in the same order (common random numbers)."""
    if bench.llm.provider is not None:
        bench.llm.provider = replace(bench.llm.provider, seed=round_no)


def run_rounds(
    bench: Bench, rounds: int, baseline: Path | None = None, chosen: str | None = None
) -> list[Result]:
    every: dict[str, Callable[[], Result]] = {
        "memq-1w": lambda: memq_run(bench, 1),
        "mem0-seq": lambda: mem0_seq_run(bench),
        "memq-2w": lambda: memq_run(bench, 2),
        "mem0-async": lambda: mem0_async_run(bench),
    }
    names = (chosen or ",".join(every)).split(",")
    unknown = sorted(set(names) - set(every))
    if unknown:
        raise SystemExit(f"ingest_compare: unknown modes {unknown}; choose from {sorted(every)}")
    modes = [every[name] for name in names]
    if baseline is not None:
        modes.insert(1, lambda: baseline_run(bench, baseline))
    results = []
    for round_no in range(1, rounds + 1):
        for mode in modes:
            same_draws(bench, round_no)
            work = bench.embed_work()
            result = mode()
            print(f"round {round_no}: {result}")
            print(f"  embedding: {embedding_work(work, bench.embed_work())}")
            print(f"  LLM prompts seen so far: {dict(bench.responder.kinds)}")
            results.append(result)
    return results


def embedding_work(before: dict[str, float], after: dict[str, float]) -> str:
    """What the embeddings endpoint did between two readings of its counters."""
    texts = after["embed_texts"] - before["embed_texts"]
    chars = after["embed_chars"] - before["embed_chars"]
    cpu = after["process_cpu_seconds"] - before["process_cpu_seconds"]
    return f"{texts:.0f} texts, {chars:.0f} characters, {cpu:.1f} CPU seconds to embed them"


@contextmanager
def running_bench(
    count: int, prefix: str, via_api: bool = False, users: int = 20, **fields: Any
) -> Iterator[Bench]:
    """A bench on ``count`` conversations of ``users`` users: the scripted model, the embeddings
    endpoint and the counting proxy started, a working directory of its own; all stopped on the
    way out."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, FakeLLMServer() as llm:
        os.environ["MEM0_TELEMETRY"] = "False"  # both read when mem0 is first imported
        os.environ["MEM0_DIR"] = tmp
        responder = Responder()
        llm.responder = responder
        embeddings, proxy = Sidecar(embeddings_server), Sidecar(CountingProxy)
        try:
            yield Bench(
                convs=conversations(count, users),
                es_url=proxy.url,
                es_requests=lambda: Counter(proxy.stats()),
                embed_work=embeddings.stats,
                embed_url=f"{embeddings.url}/v1",
                llm=llm,
                responder=responder,
                es=make_client(Settings().es),
                workdir=Path(tmp),
                via_api=via_api,
                **fields,
            )
        finally:
            proxy.close()
            embeddings.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # One Celery app per memq run in this process, each registering the same task names; they
    # only send tasks (by name, to the run's queues), so the first registration is harmless.
    warnings.filterwarnings("ignore", message="Task name 'memq\\.")
    realistic = args.model == "realistic"
    with running_bench(
        args.conversations,
        "ingestbench-",
        via_api=args.via == "api",
        users=args.users,
        mem0_concurrency=16 if realistic else 8,
    ) as bench:
        if realistic:
            bench.llm.provider = REALISTIC
        results = run_rounds(bench, args.rounds, args.baseline, args.modes)
        convs = bench.convs
    print(table(results, args.conversations))
    if realistic:
        print(order_bound(convs, REALISTIC))
    return 0


def order_bound(convs: list[Conversation], model: ProviderModel, trials: int = 2_000) -> str:
    """The best a client can do on these conversations under ``model``, whatever its own costs,
    by simulation of the model's latencies (their expected value over ``trials`` draws):
    - session order alone: the run lasts at least as long as its longest user's chain of
      model calls, one after another (the provider's in-flight limit ignored);
    - session order and the provider's limit together: a client that starts a call the moment
      a slot is free and a user's next conversation may start (first ready, first served, the
      latencies unknown in advance) and spends no time of its own between calls.
    The provider's ceiling, ``limit / mean``, is a rate over a long run: a finite run also
    waits for its last calls, so even the second bound lies below it."""
    rng = random.Random(model.seed)
    per_user = Counter(conv.user for conv in convs)
    chains = list(per_user.values())
    longest = statistics.fmean(
        max(sum(model.latency(rng) for _ in range(n)) for n in chains) for _ in range(trials)
    )
    served = statistics.fmean(limited_run(chains, model, rng) for _ in range(trials))
    count, ceiling = len(convs), model.ceiling
    return (
        f"session order: {len(per_user)} users, at most {max(chains)} conversations each, run "
        f"in order; the longest user's chain of model calls lasts {longest:.1f} s on average, so "
        f"at most {count / longest:.2f} conversations/s ({count / longest / ceiling:.0%} of the "
        f"provider's ceiling, {ceiling:.1f}/s); with at most {model.limit} calls in flight "
        f"besides, a client with no costs of its own takes {served:.1f} s: at most "
        f"{count / served:.2f} conversations/s ({count / served / ceiling:.0%} of the ceiling)"
    )


def limited_run(chains: list[int], model: ProviderModel, rng: random.Random) -> float:
    """One draw of how long users with ``chains`` conversations each take through a provider
    that holds ``model.limit`` calls at once, each user's calls one after another."""
    left = list(chains)
    ready = deque(user for user, n in enumerate(chains) if n)
    ends: list[tuple[float, int]] = []
    now = 0.0
    while ready or ends:
        while ready and len(ends) < model.limit:
            user = ready.popleft()
            left[user] -= 1
            heapq.heappush(ends, (now + model.latency(rng), user))
        now, user = heapq.heappop(ends)
        if left[user]:
            ready.append(user)
    return now


if __name__ == "__main__":
    sys.exit(main())
