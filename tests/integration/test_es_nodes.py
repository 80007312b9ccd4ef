"""A list of Elasticsearch nodes: a call that meets a dead node is carried on by the next one
within the same call, and a refusal (4xx) is never sent to a second node.

The dead node is a real listener that accepts each connection and closes it at once (what a
node does while it dies, or a port whose process is gone behind a proxy), counting them, so
the test proves the dead node was tried first and every call still answered."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from pipeline.config import ElasticsearchConfig, Settings
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import Scope
from pipeline.errors import PermanentError, TransientError
from pipeline.store.client import es_errors, make_client
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames
from pipeline.store.protocol import MemoryDoc

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class ClosingListener:
    """A TCP port that accepts connections and closes them unanswered, counting them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


class RefusingNode(BaseHTTPRequestHandler):
    """An HTTP node answering every request with a 400, as Elasticsearch does a bad query."""

    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self._refuse()

    def do_POST(self) -> None:
        self._refuse()

    def _refuse(self) -> None:
        RefusingNode.hits.append(self.path)
        body = b'{"error":{"type":"parsing_exception","reason":"bad query"},"status":400}'
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def dead_node() -> Iterator[ClosingListener]:
    listener = ClosingListener()
    yield listener
    listener.close()


def config_of(settings: Settings, urls: list[str]) -> ElasticsearchConfig:
    return settings.es.model_copy(update={"url": urls[0], "urls": tuple(urls)})


def a_memory(scope: Scope, text: str) -> MemoryDoc:
    return MemoryDoc(
        id=f"failover-{text}",
        scope=scope,
        text=text,
        text_lemmatized=text,
        embedding=[0.1] * 384,
        hash=text,
        job_id="j-failover",
        created_at=NOW,
        observed_at=NOW,
    )


def test_every_store_call_carries_on_through_a_dead_first_node(
    settings: Settings, indices: IndexNames, dead_node: ClosingListener
) -> None:
    config = config_of(settings, [dead_node.url, settings.es.url])
    scope = Scope(tenant="failover", user_id="u-1")
    doc = a_memory(scope, "cats")
    job = JobRecord(
        job_id="j-failover", tenant="failover", status=JobStatus.QUEUED, created_at=NOW,
        updated_at=NOW,
    )  # fmt: skip

    def fresh() -> ElasticStore:
        """A new client for each call: the dead node, listed first, is the first one tried."""
        return ElasticStore(make_client(config), indices)

    calls: list[tuple[str, Callable[[], object]]] = [
        ("bulk create", lambda: fresh().create_memories([doc])),
        ("get", lambda: fresh().get_memory(doc.id)),
        ("update", lambda: fresh().update_memory(doc.id, {"text": "dogs"}, scope)),
        ("refresh", lambda: fresh().make_visible()),
        ("count", lambda: fresh().count_memories(scope)),
        ("msearch", lambda: fresh().hashes_in_scope(scope, ["cats"])),
        ("save job", lambda: fresh().save_job(job)),
        ("get job", lambda: fresh().get_job(job.job_id)),
        ("delete", lambda: fresh().delete_memories({doc.id: scope})),
    ]
    results = {}
    for name, call in calls:
        before = dead_node.accepted
        results[name] = call()
        assert dead_node.accepted > before, f"{name} never tried the dead node"
    assert results["bulk create"].created == [doc.id]  # type: ignore[attr-defined]
    assert results["get"].text == "cats"  # type: ignore[attr-defined]
    assert results["count"] == 1
    assert results["msearch"] == {"cats"}
    assert results["get job"] == job
    assert results["delete"] == {doc.id}


def test_a_refusal_is_not_sent_to_another_node(settings: Settings) -> None:
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), RefusingNode) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    RefusingNode.hits.clear()
    try:
        urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
        client = make_client(config_of(settings, urls))
        with pytest.raises(PermanentError, match="bad query"), es_errors("search"):
            client.search(index="anything", query={"match_all": {}})
        assert len(RefusingNode.hits) == 1
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_all_nodes_dead_is_a_transient_error_naming_the_cause(
    settings: Settings, dead_node: ClosingListener
) -> None:
    other = ClosingListener()
    try:
        client = make_client(config_of(settings, [dead_node.url, other.url]))
        with pytest.raises(TransientError, match="unreachable"), es_errors("ping"):
            client.info()
        assert (dead_node.accepted, other.accepted) == (1, 1)  # each node once, no more
    finally:
        other.close()
