"""``create_app(settings)``: the FastAPI application, thin over ``pipeline``. Its resources
(``api.resources``) are built here from the settings; work goes to the workers through the
``Intake`` it is given (the Celery one by default, loaded on first use)."""

from __future__ import annotations

import time
from importlib.metadata import version

from fastapi import FastAPI, Request
from fastapi_offline import FastAPIOffline
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error, install_error_handlers, internal_error, log_unexpected
from api.mcp import mount_mcp
from api.metrics import Metrics, route_label
from api.operation_ids import operation_id
from api.request_ids import RequestIds
from api.resources import IntakeFactory, Resources
from api.routes import admin, export, health, jobs, mem0, mem0_platform, memories, webhooks
from api.schemas import ERROR_RESPONSES
from api.ui import mount_ui
from pipeline.config import Settings
from pipeline.ingestion.intake import Intake
from pipeline.telemetry import configure_tracing

DESCRIPTION = """Long-term memory for AI agents.

Post a conversation to `POST /v1/memories`: the answer (202) comes at once with a job id, and
workers turn the conversation into memories. Search them with `POST /v1/memories/search`.

Every call except the health checks and the chat-platform webhooks needs a tenant's API key:
`Authorization: Bearer mq_…` (or `Token mq_…`). Use **Authorize** to try calls from this page.
Errors are JSON `{"error": {"type", "message", "field"}, "detail"}`.

Every answer carries an `X-Request-ID` header: the caller's own (up to 128 token characters),
else a new one. The id is in the server's log lines for the request, in the record of a job the
request queued (`request_id`) and in the workers' log lines for that job; a 500 names it."""

TAGS = [
    {
        "name": "memories",
        "description": "Queue conversations, list, read, change and search memories",
    },
    {"name": "jobs", "description": "What became of a queued conversation; batches of them"},
    {"name": "mem0 compatibility", "description": "The wire contract of the mem0ai hosted client"},
    {"name": "chat platforms", "description": "Slack, Telegram and signed generic webhooks"},
    {"name": "admin", "description": "Tenants' API keys (admin key only)"},
    {"name": "health", "description": "Liveness, readiness and Prometheus metrics"},
]


DRAIN_MAX_BYTES = 64 * 2**20


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, before any handler reads them.

    The refused body is still read (and thrown away, up to ``DRAIN_MAX_BYTES``) before the
    answer goes out: a client such as Python's urllib sends its whole body before it reads a
    response, and a server that closes with unread bytes makes the kernel reset the connection,
    so the client would see a reset instead of the 413."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self.limit:
                await drain(receive, 0)
                await self._refuse(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        body, more = await self._buffer(receive)
        if body is None:
            if more:
                await drain(receive, self.limit)
            await self._refuse(scope, receive, send)
            return
        await self.app(scope, replay(body, receive), send)

    async def _buffer(self, receive: Receive) -> tuple[bytes | None, bool]:
        """Read a body of unknown length: None when it went past the limit, with whether
        more of it is still to come."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            more = bool(message.get("more_body", False))
            chunks.append(chunk)
            size += len(chunk)
            if size > self.limit:
                return None, more
            if not more:
                return b"".join(chunks), False

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error(413, "too_large", f"request body over {self.limit} bytes")
        response.headers["connection"] = "close"
        await response(scope, receive, send)


async def drain(receive: Receive, read: int) -> None:
    """Read and drop the rest of a refused body, up to ``DRAIN_MAX_BYTES`` in all."""
    while read <= DRAIN_MAX_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def replay(body: bytes, receive: Receive) -> Receive:
    """The buffered body as one message, then the client's own messages: a streaming response
    listens for the real disconnect (answering one at once would cut every stream short)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def instrument(app: FastAPI, settings: Settings) -> bool:
    """Trace the API's requests when an OTLP endpoint is configured (``pipeline.telemetry``);
    returns whether tracing is on. The default intake traces the tasks it sends
    (``workers.serving.celery_intake``): each carries the request's trace context, which the
    workers continue."""
    if not configure_tracing(settings, "memq-api"):
        return False
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz,readyz,metrics")
    return True


def create_app(
    settings: Settings | None = None, intake: Intake | IntakeFactory | None = None
) -> FastAPI:
    """Build the API for ``settings`` (read from the environment when omitted). Jobs go
    through ``intake``: an ``Intake``, or a factory of one called on first use (by default
    the workers' Celery intake). Building it connects to nothing and imports no Celery."""
    settings = settings or Settings()
    resources = Resources(settings, intake)
    # The docs pages load Swagger UI and ReDoc from files shipped in a package, not from a CDN,
    # so /docs and /redoc work on machines without internet.
    app = FastAPIOffline(
        title="memq",
        version=version("memq"),
        description=DESCRIPTION,
        responses=ERROR_RESPONSES,
        static_url="/docs-assets",
        openapi_tags=TAGS,
        generate_unique_id_function=operation_id,
    )
    app.state.settings = settings
    app.state.resources = resources
    app.state.metrics = Metrics()
    app.state.limits = resources.limits
    install_error_handlers(app)
    app.add_middleware(RequestCounter, metrics=app.state.metrics)
    app.add_middleware(BodyLimit, limit=settings.api.max_body_bytes)
    app.add_middleware(RequestIds)  # the last added is the outermost: its header goes on all
    app.router.lifespan_context = mount_mcp(app, resources)
    for router in (
        health.router,
        memories.router,
        jobs.router,
        admin.router,
        webhooks.router,
        mem0.router,
        mem0_platform.router,
        export.router,
    ):
        app.include_router(router)
    mount_ui(app)
    return app


class RequestCounter:
    """Count every request by route and status, and time it by route to its response's start
    (a streamed body, such as an export, runs on after it). A bug before the response started
    becomes a JSON 500 here, answered like any other response, so the connection stays usable
    (an exception left to the server drops it). Plain ASGI, not a ``BaseHTTPMiddleware``: that
    one runs each request's handler as a second task joined by a memory stream."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        before = dict(scope)  # routing into a mounted app rewrites the scope's paths
        answered = False

        async def counted(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start" and not answered:
                answered = True
                self.count(scope, before, message["status"], time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, counted)
        except Exception:
            if answered:
                raise  # the answer is under way: only dropping the connection can end it
            request = Request(scope)
            log_unexpected(request)
            await internal_error(request)(scope, receive, counted)

    def count(self, scope: Scope, before: Scope, status: int, elapsed_s: float) -> None:
        request = Request(scope)
        route = route_label(request, before)
        self.metrics.requests.labels(request.method, route, str(status)).inc()
        self.metrics.request_seconds.labels(request.method, route).observe(elapsed_s)
