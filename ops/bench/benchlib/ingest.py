"""Ingestion runs of memq and mem0 over the same conversations, the same scripted model and the same
embeddings, with the calls each made."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
from elasticsearch import Elasticsearch

from benchlib.conversations import Conversation, conversations
from benchlib.mem0 import Endpoints, EndpointServer, handler_for, mem0_config
from benchlib.model import Provider, ScriptedModel
from benchlib.proxy import STATS_PATH, CountingProxy
from benchlib.replies import Responder
from benchlib.services import free_port
from benchlib.workers import start_workers, where_time_went
from pipeline.adapters.embedding.local import MiniLMEmbedder
from pipeline.config import EmbedderConfig, Settings
from pipeline.domain.jobs import TERMINAL_STATUSES, JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames, drop_indices
from workers.app import MemqCelery, create_celery
from workers.intake import submit

TENANT = "ingestbench"


TERMINAL = TERMINAL_STATUSES


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


@dataclass
class Bench:
    convs: list[Conversation]
    es_url: str  # what both systems are given: the counting proxy
    es_requests: Callable[[], Counter[str]]
    embed_work: Callable[[], dict[str, float]]  # the endpoint's counters (Endpoints.stats)
    embed_url: str
    llm: ScriptedModel
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
        return llm.chat_count(), self.embed_calls(), self.es_requests(), llm.refused


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


def drop_redis(settings: Settings, *patterns: str) -> None:
    """The run's job states, session lines and queues (and kombu's bindings for them)."""
    import redis

    client = redis.Redis.from_url(settings.redis.url)
    for pattern in patterns:
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
    client.close()


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


def drop_mem0_indices(es: Elasticsearch, index: str) -> None:
    for name in (index, f"{index}_entities"):  # its memories, its entity store
        es.indices.delete(index=name, ignore_unavailable=True)


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


REALISTIC = Provider(median_s=1.0, p95_s=3.0, limit=16, retry_after_s=1)


def same_draws(bench: Bench, round_no: int) -> None:
    """Reseed the provider model's latencies with the round's number before a run, so every
    run of a round draws the same latencies in the same order (common random numbers)."""
    if bench.llm.provider is not None:
        bench.llm.provider = replace(bench.llm.provider, seed=round_no)


@contextmanager
def running_bench(
    count: int, prefix: str, via_api: bool = False, users: int = 20, **fields: Any
) -> Iterator[Bench]:
    """A bench on ``count`` conversations of ``users`` users: the scripted model, the embeddings
    endpoint and the counting proxy started, a working directory of its own; all stopped on the
    way out."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, ScriptedModel() as llm:
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


BASELINE_INTAKE = """
import json, sys
from pipeline.config import Settings
import importlib, os
# the tree's own layout (run from its root): the editable install's finder would otherwise
# resolve a subpackage this tree lacks in the installed checkout
grouped = os.path.isdir("pipeline/domain")
models = importlib.import_module("pipeline.domain.models" if grouped else "pipeline.models")
AddRequest = models.AddRequest
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
