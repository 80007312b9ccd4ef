"""``create_app(settings)``: the FastAPI application, thin over ``pipeline`` and ``workers``."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error, install_error_handlers
from api.limits import TenantLimits
from api.metrics import Metrics
from api.routes import admin, health, jobs, mem0, memories, webhooks
from pipeline.config import Settings
from pipeline.keys import KeyStore
from workers.app import MemqCelery, create_celery

log = logging.getLogger("memq.api")


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
        await self.app(scope, replay(body), send)

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


def replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def create_app(settings: Settings | None = None, celery: MemqCelery | None = None) -> FastAPI:
    """Build the API for ``settings`` (read from the environment when omitted)."""
    settings = settings or Settings()
    celery = celery or create_celery(settings)
    app = FastAPI(title="memq", version="0.1.0", description="Long-term memory for AI agents.")
    app.state.settings = settings
    app.state.celery = celery
    app.state.keys = KeyStore(celery.runtime.es, celery.runtime.store.names)
    app.state.metrics = Metrics()
    runtime = celery.runtime
    app.state.limits = TenantLimits(
        settings.api, runtime.redis, settings.redis.url, settings.es.index_prefix
    )
    install_error_handlers(app)
    app.middleware("http")(count_requests)
    app.add_middleware(BodyLimit, limit=settings.api.max_body_bytes)
    for router in (
        health.router,
        memories.router,
        jobs.router,
        admin.router,
        webhooks.router,
        mem0.router,
    ):
        app.include_router(router)
    return app


async def count_requests(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Count every request by route and status. A bug becomes a JSON 500 here, answered like any
    other response, so the connection stays usable (an exception left to the server drops it)."""
    started = time.perf_counter()
    try:
        response = await call_next(request)
    except Exception:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        response = error(500, "internal", "internal error; the server log has the details")
    route = request.scope.get("route")
    path = getattr(route, "path", "unmatched")
    request.app.state.metrics.requests.labels(request.method, path, str(response.status_code)).inc()
    request.state.elapsed_s = time.perf_counter() - started
    return response
