"""memq against mem0 OSS (mem0ai, `mem0.Memory`): evidence recall on LoCoMo dev, side by side,
each through its own public interface.

memq runs as a user runs it: a private stack (its own worker and API, index prefix and queues;
see api_stack.py) gets one `POST /v1/memories` per session (speaker in each message's `name`,
the session date as `timestamp`, infer=false) and one `POST /v1/memories/search` per question.
mem0 gets the same sessions through `Memory.add(messages, user_id=..., infer=False)` (the
messages with their `name`; OSS mem0 refuses `timestamp`, so the date rides in metadata) and
the same questions through `Memory.search`. Both use the same Elasticsearch node and the same
model, all-MiniLM-L6-v2 (memq's `MiniLMEmbedder`; for mem0, served from this process as an
OpenAI-compatible `POST /v1/embeddings` on 127.0.0.1). mem0's LLM points at a stub that counts
its calls (there must be none). Questions are asked of the two systems interleaved (the order
swapped every other question) for the latencies; memq's include the HTTP hop. Hits are matched
to turns by their text and scored with locomo_recall's functions. Needs the stack (ops/up).

    .venv/bin/python ops/bench/mem0_compare.py [--data ../shared/data/locomo-dev] [--keep]
        [--port 8311]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from api_stack import running_stack
from elasticsearch import Elasticsearch
from locomo_recall import (
    Search,
    TurnIndex,
    api_search,
    asked_at,
    evaluate,
    ingest,
    read_jsonl,
    said,
    sessions,
    table,
)

from pipeline.config import Settings
from pipeline.embedding.local import MiniLMEmbedder
from pipeline.store.client import make_client

MEMQ_PREFIX = "memqbench-mem0cmp"
MEM0_INDEX = "mem0bench_locomo"
MEM0_INDICES = (MEM0_INDEX, f"{MEM0_INDEX}_entities")  # its memories, its entity store
TOP_K = 10


# --- the local endpoints mem0 talks to -------------------------------------------------------


@dataclass
class Endpoints:
    """What the local server answers with and what it saw."""

    embedder: MiniLMEmbedder
    turns: int
    embed_calls: int = 0
    embed_seconds: float = 0.0
    embed_texts: int = 0
    embed_chars: int = 0
    llm_calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        started = time.perf_counter()
        vectors = self.embedder.embed(texts)
        with self.lock:
            self.embed_calls += 1
            self.embed_seconds += time.perf_counter() - started
            self.embed_texts += len(texts)
            self.embed_chars += sum(len(t) for t in texts)
        return {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": encoded(v, body)}
                for i, v in enumerate(vectors)
            ],
            "model": body.get("model", "all-MiniLM-L6-v2"),
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }

    def stats(self) -> dict[str, float]:
        """What the endpoint has answered so far, and the CPU time of the process serving it
        (all of that process's work, where the endpoint shares it)."""
        with self.lock:
            return {
                "embed_calls": self.embed_calls,
                "embed_seconds": self.embed_seconds,
                "embed_texts": self.embed_texts,
                "embed_chars": self.embed_chars,
                "process_cpu_seconds": sum(os.times()[:2]),
                "llm_calls": self.llm_calls,
            }

    def count_llm_call(self) -> None:
        with self.lock:
            self.llm_calls += 1


def encoded(vector: list[float], body: dict[str, Any]) -> list[float] | str:
    """As the OpenAI API answers: floats, or with ``encoding_format: base64`` (what the openai
    SDK asks for unless told otherwise) the little-endian float32 bytes in base64."""
    if body.get("encoding_format") == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
    return vector


def handler_for(endpoints: Endpoints) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            """`GET /stats`: what the endpoint has answered so far."""
            self._reply(200 if self.path == "/stats" else 404, endpoints.stats())

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
            if self.path == "/v1/embeddings":
                self._reply(200, endpoints.embeddings(body))
            else:  # /llm/...: with infer=False this must never be reached
                endpoints.count_llm_call()
                self._reply(501, {"error": {"message": "benchmark LLM stub", "type": "stub"}})

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class EndpointServer(ThreadingHTTPServer):
    """The endpoints' HTTP server. Its listen backlog holds a burst of clients connecting at
    once: socketserver's default of 5 drops the rest, which connect again only after the
    kernel's one-second SYN retry, a wait no hosted provider adds."""

    request_queue_size = 128


def serve(endpoints: Endpoints) -> ThreadingHTTPServer:
    server = EndpointServer(("127.0.0.1", 0), handler_for(endpoints))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --- mem0 ------------------------------------------------------------------------------------


def mem0_config(es_url: str, port: int, workdir: Path) -> dict[str, Any]:
    es = urlsplit(es_url)
    local = f"http://127.0.0.1:{port}"
    return {
        "vector_store": {
            "provider": "elasticsearch",
            "config": {
                "collection_name": MEM0_INDEX,
                "host": f"{es.scheme}://{es.hostname}",
                "port": es.port or 9200,
                "user": "bench",  # mem0 insists on credentials; security is off on this node
                "password": "bench",
                "embedding_model_dims": 384,
                "use_ssl": False,
                "verify_certs": False,
            },
        },
        "embedder": {
            "provider": "openai",
            "config": {
                "model": "all-MiniLM-L6-v2",
                "api_key": "local",
                "openai_base_url": f"{local}/v1",
                "embedding_dims": 384,
            },
        },
        "llm": {
            "provider": "openai",
            "config": {"model": "stub", "api_key": "stub", "openai_base_url": f"{local}/llm/v1"},
        },
        "history_db_path": str(workdir / "history.db"),
    }


def make_mem0(config: dict[str, Any], es: Elasticsearch) -> Any:
    """mem0's `Memory`, its index created by mem0 itself (5 shards, 1 replica). The replica is
    dropped afterwards: on one node it would stay unassigned and turn the shared cluster yellow;
    an unassigned replica serves nothing, so mem0's searches are unchanged."""
    from mem0 import Memory  # type: ignore[import-untyped]

    memory = Memory.from_config(config)
    es.indices.put_settings(index=MEM0_INDEX, settings={"index": {"number_of_replicas": 0}})
    return memory


def mem0_ingest(memory: Any, turns: list[dict[str, Any]]) -> float:
    """One `Memory.add(..., infer=False)` per session, the same messages as memq's; OSS mem0
    refuses `timestamp` (platform only), so the session date rides in metadata."""
    started = time.perf_counter()
    for session in sessions(turns):
        first = session[0]
        messages = [{"role": "user", "content": said(t), "name": t["speaker"]} for t in session]
        metadata = {
            "session": first["session_id"],
            "session_date": first["session_datetime_iso"],
        }
        memory.add(messages, user_id=first["conv_id"], metadata=metadata, infer=False)
    return len(turns) / (time.perf_counter() - started)


def drop_mem0(es: Elasticsearch) -> None:
    for name in MEM0_INDICES:
        es.indices.delete(index=name, ignore_unavailable=True)


# --- interleaved search ----------------------------------------------------------------------


@dataclass
class Run:
    """Memory texts found per question (by ``qa_id``) and per-query latencies (ms)."""

    search: Search
    hits: dict[str, list[str]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    def ask(self, question: dict[str, Any]) -> None:
        started = time.perf_counter()
        found = self.search(question)
        self.latencies.append((time.perf_counter() - started) * 1000)
        self.hits[question["qa_id"]] = found


def mem0_search(memory: Any) -> Search:
    def search(question: dict[str, Any]) -> list[str]:
        reply = memory.search(
            question["question"], top_k=TOP_K, filters={"user_id": question["conv_id"]}
        )
        return [str(item.get("memory", "")) for item in reply["results"]]

    return search


def interleave(runs: list[Run], questions: list[dict[str, Any]]) -> None:
    """A B, then B A, per question; one untimed warm-up search each first."""
    for run in runs:
        run.search(questions[0])
    for i, question in enumerate(questions):
        for run in runs if i % 2 == 0 else runs[::-1]:
            run.ask(question)


# --- report ----------------------------------------------------------------------------------


def percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def timing_table(turns: int, ingest_rates: dict[str, float], runs: dict[str, Run]) -> str:
    lines = [
        "| system | ingest s | ingest turns/s | search p50 ms | search p95 ms |",
        "|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        rate = ingest_rates[name]
        lines.append(
            f"| {name} | {turns / rate:.1f} | {rate:.1f} | "
            f"{percentile(run.latencies, 50):.1f} | {percentile(run.latencies, 95):.1f} |"
        )
    return "\n".join(lines)


def report(
    questions: list[dict[str, Any]],
    index: TurnIndex,
    rates: dict[str, float],
    runs: dict[str, Run],
    stub: Endpoints,
) -> None:
    print(table({name: evaluate(run.hits, questions, index) for name, run in runs.items()}))
    print()
    print(timing_table(turns=stub.turns, ingest_rates=rates, runs=runs))
    inside = stub.embed_seconds / max(stub.embed_calls, 1) * 1000
    print(
        f"\nmem0's embeddings endpoint: {stub.embed_calls} calls, {inside:.1f} ms each inside "
        f"the model on average. LLM stub calls: {stub.llm_calls}."
    )


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parents[3] / "shared/data/locomo-dev"
    )
    parser.add_argument("--keep", action="store_true", help="keep both systems' indices")
    parser.add_argument("--port", type=int, default=8311, help="memq's private API port")
    return parser.parse_args(argv)


def compare(data: Path, keep: bool, port: int, workdir: Path) -> None:
    turns = read_jsonl(data / "turns.jsonl")
    questions = read_jsonl(data / "qa.jsonl")
    settings = Settings()
    stub = Endpoints(
        MiniLMEmbedder(settings.embedder.model_copy(update={"kind": "local"})), len(turns)
    )
    server = serve(stub)
    es = make_client(settings.es)
    drop_mem0(es)
    memory = make_mem0(mem0_config(settings.es.url, server.server_port, workdir), es)
    with (
        running_stack(MEMQ_PREFIX, port, workdir / "logs", keep=keep) as stack,
        stack.client() as client,
    ):
        rates = {"memq": ingest(client, turns), "mem0": mem0_ingest(memory, turns)}
        es.indices.refresh(index=MEM0_INDEX)
        runs = {
            "memq": Run(api_search(client, asked_at(turns))),
            "mem0": Run(mem0_search(memory)),
        }
        interleave(list(runs.values()), questions)
    print(f"{len(turns)} turns, {len(questions)} questions, top {TOP_K}, infer=False for both")
    report(questions, TurnIndex(turns), rates, runs, stub)
    memory.close()
    server.shutdown()
    if not keep:
        drop_mem0(es)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.data / "turns.jsonl").is_file():
        print(f"mem0_compare: no turns.jsonl under {args.data}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mem0bench-") as workdir:
        os.environ["MEM0_TELEMETRY"] = "False"  # both read when mem0 is imported, in make_mem0
        os.environ["MEM0_DIR"] = workdir
        compare(args.data, args.keep, args.port, Path(workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
