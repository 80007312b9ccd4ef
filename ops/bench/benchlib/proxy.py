"""A counting proxy in front of Elasticsearch: every request forwarded, counted by kind."""

from __future__ import annotations

import http.client
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler
from typing import Any

from benchlib.mem0 import EndpointServer

ES_UPSTREAM = ("127.0.0.1", 9200)


STATS_PATH = "/stats"


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
