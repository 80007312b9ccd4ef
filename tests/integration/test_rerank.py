"""The ``/rerank`` client against a real local HTTP server, alone and inside a search."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pipeline.config import RerankConfig, Settings
from pipeline.domain.models import Scope
from pipeline.errors import TransientError
from pipeline.serving.rerank import HttpReranker
from pipeline.serving.search import Searcher, SearchQuery
from pipeline.store.indices import IndexNames
from tests.integration.test_search import put
from workers.runtime import Runtime, make_reranker

pytestmark = pytest.mark.integration

Answer = Callable[[dict[str, Any]], tuple[int, Any]]


def by_overlap(body: dict[str, Any]) -> list[float]:
    """A server-side model: the share of the query's words found in each text."""
    wanted = set(body["query"].lower().split())
    texts = body.get("documents") or body.get("texts") or []
    return [len(wanted & set(t.lower().split())) / len(wanted) for t in texts]


def cohere_shape(body: dict[str, Any]) -> tuple[int, Any]:
    """vLLM / Jina / Cohere: ``results`` sorted by score, each with its ``relevance_score``."""
    scores = by_overlap(body)
    ranked = sorted(range(len(scores)), key=lambda i: -scores[i])[: body.get("top_n")]
    return 200, {"results": [{"index": i, "relevance_score": scores[i]} for i in ranked]}


def tei_shape(body: dict[str, Any]) -> tuple[int, Any]:
    """TEI: a bare list of ``{index, score}``, here as raw logits (outside [0, 1])."""
    return 200, [{"index": i, "score": 10 * s - 5} for i, s in enumerate(by_overlap(body))]


class RerankServer:
    """A real HTTP server on 127.0.0.1 answering ``POST /rerank`` with ``answer(body)``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/rerank"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.bodies.append(body)
                outer.headers.append(dict(self.headers))
                status, payload = outer.answer(body) if self.path == "/rerank" else (404, {})
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], RerankServer]]:
    started: list[RerankServer] = []

    def start(answer: Answer) -> RerankServer:
        started.append(RerankServer(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def test_documents_format_sends_query_documents_and_model(
    serve: Callable[[Answer], RerankServer],
) -> None:
    server = serve(cohere_shape)
    config = RerankConfig(url=server.url, model="bge-reranker", api_key="s3cret")  # type: ignore[arg-type]
    scores = HttpReranker(config).rerank("green tea", ["coffee", "green tea", "tea"])
    assert scores == [0.0, 1.0, 0.5]  # back in the order given, whatever the server's order
    assert server.bodies == [
        {
            "query": "green tea",
            "documents": ["coffee", "green tea", "tea"],
            "top_n": 3,
            "model": "bge-reranker",
        }
    ]
    assert server.headers[0]["Authorization"] == "Bearer s3cret"


def test_texts_format_and_raw_logits(serve: Callable[[Answer], RerankServer]) -> None:
    server = serve(tei_shape)
    reranker = HttpReranker(RerankConfig(url=server.url, format="texts"))
    scores = reranker.rerank("green tea", ["coffee", "green tea"])
    assert server.bodies == [{"query": "green tea", "texts": ["coffee", "green tea"]}]
    assert 0 < scores[0] < 0.01 and 0.99 < scores[1] < 1  # logistic of -5 and 5


@pytest.mark.parametrize(
    ("status", "payload", "reason"),
    [
        (503, {"error": "loading model"}, "answered 503"),
        (200, {"results": [{"index": 0, "relevance_score": 0.5}]}, "1 scores for 2 texts"),
        (200, {"results": [{"index": 7, "relevance_score": 0.5}] * 2}, "unusable result"),
        (200, {"unexpected": True}, "unexpected answer"),
        (200, [{"index": 0, "score": "high"}, {"index": 1, "score": 1}], "unusable result"),
    ],
)
def test_a_failing_or_malformed_answer_is_a_transient_error(
    serve: Callable[[Answer], RerankServer], status: int, payload: Any, reason: str
) -> None:
    server = serve(lambda body: (status, payload))
    with pytest.raises(TransientError) as caught:
        HttpReranker(RerankConfig(url=server.url)).rerank("q", ["a", "b"])
    assert reason in caught.value.reason and server.url in caught.value.reason


def test_an_unreachable_endpoint_is_a_transient_error() -> None:
    dead = RerankServer(cohere_shape)
    url = dead.url
    dead.close()
    with pytest.raises(TransientError):
        HttpReranker(RerankConfig(url=url, timeout_s=2)).rerank("q", ["a"])


def test_rerank_is_off_unless_an_endpoint_is_configured(settings: Settings) -> None:
    assert make_reranker(settings) is None
    configured = settings.model_copy(
        update={"rerank": RerankConfig(url="http://127.0.0.1:9/rerank")}
    )
    assert isinstance(make_reranker(configured), HttpReranker)


def test_a_search_reranks_the_over_fetched_candidates_and_returns_top_k(
    settings: Settings, indices: IndexNames, serve: Callable[[Answer], RerankServer]
) -> None:
    runtime = Runtime(settings)
    scope = Scope(tenant="rerank", user_id=f"u-{uuid.uuid4().hex[:8]}")
    noise = [f"note number {i} about the garden" for i in range(60)]
    put(runtime, scope, *noise, "the user drinks green tea every morning")
    server = serve(cohere_shape)
    searcher: Searcher = replace(
        runtime.searcher, reranker=HttpReranker(RerankConfig(url=server.url))
    )
    query = SearchQuery(
        query="what does the user drink in the morning", scope=scope, top_k=3, rerank=True
    )
    hits = searcher.search(query.model_copy(update={"explain": True}))
    assert len(server.bodies) == 1
    assert len(server.bodies[0]["documents"]) == settings.search.rerank_candidates == 50
    assert len(hits) == 3
    assert hits[0].memory == "the user drinks green tea every morning"
    assert all(h.explain is not None and h.explain.rerank == h.score for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    plain = searcher.search(query.model_copy(update={"rerank": False}))
    assert len(server.bodies) == 1  # off unless the search asks for it
    assert len(plain) == 3
