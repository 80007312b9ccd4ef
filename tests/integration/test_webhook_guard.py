"""Job webhooks cannot reach inside the deployment, and are signed: a real worker refusing a
loopback URL, and the sender delivering to an allow-listed receiver over real HTTP."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from pipeline.domain.jobs import TERMINAL_STATUSES, JobRecord, JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.features.chat import GENERIC, SignedBody, verify_hmac
from pipeline.features.webhook import (
    Delivery,
    RefusedError,
    WebhookSender,
    parse_allow,
    parse_allow_list,
    tenant_signing_key,
)
from tests.processes import WorkerProcess
from workers.app import MemqCelery
from workers.intake import submit

pytestmark = pytest.mark.integration


class Receiver:
    """A real HTTP server on loopback that records what it is sent; ``/moved`` answers with a
    redirect to ``/elsewhere``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if self.path == "/moved":
                    self.send_response(307)
                    self.send_header("location", "/elsewhere")
                else:
                    self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as server:
        yield server


def finished(app: MemqCelery, job_id: str, timeout_s: float = 60) -> JobRecord:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = app.runtime.store.get_job(job_id)
        if record is not None and record.status in TERMINAL_STATUSES:
            return record
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish within {timeout_s}s")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/hook",
        "http://localhost:{port}/hook",
        "http://[::ffff:127.0.0.1]:{port}/hook",
        "http://0.0.0.0:{port}/hook",
        "http://[64:ff9b::7f00:1]:{port}/hook",  # NAT64 of 127.0.0.1
        "http://[::127.0.0.1]:{port}/hook",  # IPv4-compatible
        "http://[2002:7f00:1::]:{port}/hook",  # 6to4 of 127.0.0.1
        "http://192.0.0.8:{port}/hook",
    ],
)
def test_a_worker_refuses_a_webhook_inside_the_deployment(
    worker: WorkerProcess, celery_app: MemqCelery, receiver: Receiver, url: str
) -> None:
    request = AddRequest(
        scope=Scope(user_id=f"ssrf-{uuid.uuid4().hex[:8]}"),
        messages=[MessageIn.model_validate({"role": "user", "content": "I keep bees."})],
        infer=False,
        webhook_url=url.format(port=receiver.port),
    )
    job_id = submit(celery_app, request).record.job_id
    record = finished(celery_app, job_id)
    assert record.status == JobStatus.SUCCEEDED  # a refused webhook does not fail the job
    deadline = time.monotonic() + 10
    while not record.errors and time.monotonic() < deadline:  # recorded after the webhook
        time.sleep(0.2)
        record = celery_app.runtime.store.get_job(job_id) or record
    reasons = [e["reason"] for e in record.errors]
    assert len(reasons) == 1 and reasons[0].startswith("webhook refused:"), reasons
    assert "HTTP" not in reasons[0] and "Error" not in reasons[0]  # nothing learnt of the port
    assert receiver.requests == []


def test_an_allow_listed_receiver_gets_a_signed_delivery(receiver: Receiver) -> None:
    sender = WebhookSender(
        allow=parse_allow_list(f"127.0.0.1:{receiver.port}"), signing_secret="server-secret"
    )
    payload = {"job_id": "j1", "status": JobStatus.SUCCEEDED, "results": []}
    assert sender.post(f"http://127.0.0.1:{receiver.port}/hook", payload, "tenant-a") is None
    [delivery] = receiver.requests
    headers = {k.lower(): v for k, v in delivery["headers"].items()}
    signed = SignedBody(delivery["body"], headers["x-memq-timestamp"], headers["x-memq-signature"])
    key = tenant_signing_key("server-secret", "tenant-a")
    verify_hmac(GENERIC, key, signed, now=datetime.now(UTC), tolerance_s=60)
    other_tenant = tenant_signing_key("server-secret", "tenant-b")
    with pytest.raises(Exception, match="bad webhook signature"):
        verify_hmac(GENERIC, other_tenant, signed, now=datetime.now(UTC), tolerance_s=60)


def test_the_allow_list_is_per_port(receiver: Receiver) -> None:
    sender = WebhookSender(allow=parse_allow_list(f"127.0.0.1:{receiver.port + 1}"))
    reason = sender.post(f"http://127.0.0.1:{receiver.port}/hook", {}, "t")
    assert reason is not None and reason.startswith("webhook refused:")
    assert receiver.requests == []


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    sender = WebhookSender(allow=parse_allow_list("127.0.0.0/8"))
    reason = sender.post(f"http://127.0.0.1:{receiver.port}/moved", {}, "t")
    assert reason == "webhook not delivered: HTTP 307"
    assert [r["path"] for r in receiver.requests] == ["/moved"]


def test_the_checked_address_is_the_one_connected_to(receiver: Receiver) -> None:
    """A name is resolved once per delivery and the connection goes to that address, with the
    name kept in Host: a DNS answer that changes afterwards (rebinding) is never used."""
    answers = iter([["127.0.0.1"], ["10.9.9.9"]])
    sender = WebhookSender(
        allow=parse_allow_list(f"127.0.0.1:{receiver.port}"),
        resolve=lambda host, port: next(answers),
    )
    url = f"http://hooks.example:{receiver.port}/hook"
    assert sender.post(url, {}, "t") is None
    headers = {k.lower(): v for k, v in receiver.requests[0]["headers"].items()}
    assert headers["host"] == f"hooks.example:{receiver.port}"
    assert sender.post(url, {}, "t") is not None  # the second answer is private: refused
    assert len(receiver.requests) == 1


def test_a_name_with_any_private_address_is_refused(receiver: Receiver) -> None:
    sender = WebhookSender(resolve=lambda host, port: ["93.184.215.14", "127.0.0.1"])
    reason = sender.post("https://mixed.example/hook", {}, "t")
    assert reason is not None and reason.startswith("webhook refused:")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.100.100.200",  # shared address space (a metadata endpoint too)
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "fd00:ec2::254",
        "fe80::1",
        "::ffff:10.0.0.1",
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b:1::a00:1",  # local-use NAT64
        "::169.254.169.254",
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
        "192.0.0.9",
    ],
)
def test_addresses_inside_a_deployment_are_refused_before_any_connection(address: str) -> None:
    sender = WebhookSender(resolve=lambda host, port: [address])
    with pytest.raises(RefusedError):
        sender.vetted_address(httpx.URL("http://target.example/hook"))


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::1111", "64:ff9b::808:808"])
def test_public_addresses_are_allowed(address: str) -> None:
    sender = WebhookSender(resolve=lambda host, port: [address])
    assert sender.vetted_address(httpx.URL("http://target.example/hook")) == address


def no_such_host(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def test_unresolvable_and_odd_urls_are_refused_without_detail() -> None:
    sender = WebhookSender(resolve=no_such_host)
    for url in ("http://name.invalid/hook", "ftp://example.com/", "http:///nohost"):
        reason = sender.post(url, {}, "t")
        assert reason is not None and reason.startswith("webhook refused:"), (url, reason)


@pytest.mark.parametrize("entry", ["nonsense", "127.0.0.1:0", "10.0.0.0/33", "[::1]:x"])
def test_a_bad_allow_entry_is_named(entry: str) -> None:
    with pytest.raises(ValueError, match="not a"):
        parse_allow(entry)


class Trickler:
    """A real TCP server that answers every connection one byte every 0.2 s, for a minute: each
    read arrives well within any per-read timeout."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopping = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.trickle, args=(conn,), daemon=True).start()

    def trickle(self, conn: socket.socket) -> None:
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 300:
                if self.stopping.wait(0.2):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def close(self) -> None:
        self.stopping.set()
        self.listener.close()


@pytest.fixture
def trickler() -> Iterator[Trickler]:
    server = Trickler()
    yield server
    server.close()


def test_a_receiver_that_trickles_its_answer_gets_one_deadline(trickler: Trickler) -> None:
    sender = WebhookSender(allow=parse_allow_list("127.0.0.0/8"), timeout_s=1)
    started = time.monotonic()
    reason = sender.post(f"http://127.0.0.1:{trickler.port}/hook", {}, "t")
    assert time.monotonic() - started < 3
    assert reason is not None and reason.startswith("webhook not delivered"), reason


def test_a_slow_receiver_delays_no_other_tenants_delivery(
    trickler: Trickler, receiver: Receiver
) -> None:
    sender = WebhookSender(allow=parse_allow_list("127.0.0.0/8"), timeout_s=2)
    slow = Delivery(f"http://127.0.0.1:{trickler.port}/hook", {"job_id": "a"}, "tenant-a")
    fast = Delivery(f"http://127.0.0.1:{receiver.port}/hook", {"job_id": "b"}, "tenant-b")
    started = time.monotonic()
    reasons = sender.post_all([slow, fast])
    assert time.monotonic() - started < 4  # one deadline, not one per delivery
    assert reasons[0] is not None and reasons[1] is None
    assert [r["path"] for r in receiver.requests] == ["/hook"]
