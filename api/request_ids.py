"""Request ids: every answer names the request it answers, in its ``X-Request-ID`` header.

The id is the caller's own ``X-Request-ID`` when it is a sane one (1 to 128 of HTTP's token
characters: letters, digits and ``!#$%&'*+-.^_`|~``), else a new one (32 hex digits). It is in
the log context of the request (``pipeline.logs``), so every line the request logs names it,
on the request's state (``request_id_of``), from where the intake writes it into the job's
record and the workers' lines about the job, and in the answer's header: every answer,
including refusals of the body limit, errors, 500s and the answers of mounted apps (``/mcp``).
"""

from __future__ import annotations

import re
import uuid

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.logs import log_context

HEADER = "X-Request-ID"
_HEADER_KEY = HEADER.lower().encode()
STATE_KEY = "request_id"
_SANE = re.compile(r"[A-Za-z0-9!#$%&'*+\-.^_`|~]{1,128}")


def new_request_id() -> str:
    return uuid.uuid4().hex


def accepted_id(value: bytes | None) -> str | None:
    """The caller's id when it is sane (see the module docstring), else None."""
    if value is None:
        return None
    text = value.decode("latin-1")
    return text if _SANE.fullmatch(text) else None


def request_id_of(request: Request | None) -> str | None:
    """The id ``RequestIds`` gave ``request`` (None outside it, as over MCP's stdio)."""
    if request is None:
        return None
    value = request.scope.get("state", {}).get(STATE_KEY)
    return value if isinstance(value, str) else None


class RequestIds:
    """Give each HTTP request its id (see the module docstring). It stands outside every other
    middleware of the app, so that whatever answers carries the header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = accepted_id(dict(scope["headers"]).get(_HEADER_KEY)) or new_request_id()
        # the state dict is the request's own (the server copies it per request)
        scope.setdefault("state", {})[STATE_KEY] = request_id
        header = (_HEADER_KEY, request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != _HEADER_KEY]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        with log_context(request_id=request_id):
            await self.app(scope, receive, send_with_id)
