"""mem0 against local endpoints: an OpenAI-compatible embeddings and chat server in process (MiniLM
vectors, scripted replies) and the mem0 configuration that points at it."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from elasticsearch import Elasticsearch

from pipeline.adapters.embedding.local import MiniLMEmbedder

MEM0_INDEX = "mem0bench_locomo"


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
    """mem0's `Memory`, its index (the config's collection) created by mem0 itself (5 shards, 1
    replica). The replica is dropped afterwards: on one node it would stay unassigned and turn
    the shared cluster yellow; an unassigned replica serves nothing, so mem0's searches are
    unchanged."""
    from mem0 import Memory  # type: ignore[import-untyped]

    memory = Memory.from_config(config)
    index = config["vector_store"]["config"]["collection_name"]
    es.indices.put_settings(index=index, settings={"index": {"number_of_replicas": 0}})
    return memory


def drop_mem0(es: Elasticsearch, index: str = MEM0_INDEX) -> None:
    """Delete mem0's index and its entity store's."""
    for name in (index, f"{index}_entities"):
        es.indices.delete(index=name, ignore_unavailable=True)
