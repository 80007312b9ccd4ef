"""memq's errors as HTTP answers: always JSON ``{"error": {"type", "message", "field"},
"detail": message}`` (``detail`` is where mem0 clients read the message), never a stack trace.
The one place exceptions become status codes."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from api.deps import ForbiddenError, UnauthorizedError
from pipeline.chat import SignatureError
from pipeline.errors import (
    InvalidInputError,
    MemqError,
    NotFoundError,
    PermanentError,
    RetriesExhaustedError,
    TransientError,
)

log = logging.getLogger("memq.api")


def error(status: int, kind: str, message: str, field: str | None = None) -> JSONResponse:
    body = {"error": {"type": kind, "message": message, "field": field}, "detail": message}
    headers = {"Retry-After": "5"} if status == 503 else None
    return JSONResponse(status_code=status, content=body, headers=headers)


def _status(exc: MemqError) -> tuple[int, str]:
    table: list[tuple[type[MemqError], int, str]] = [
        (UnauthorizedError, 401, "unauthorized"),
        (ForbiddenError, 403, "forbidden"),
        (SignatureError, 401, "bad_signature"),
        (NotFoundError, 404, "not_found"),
        (InvalidInputError, 422, "invalid_input"),
        (TransientError, 503, "unavailable"),
        (RetriesExhaustedError, 503, "unavailable"),
        (PermanentError, 400, "bad_request"),
    ]
    return next(
        ((status, kind) for cls, status, kind in table if isinstance(exc, cls)), (500, "internal")
    )


def location(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(MemqError)
    async def memq_error(_: Request, exc: MemqError) -> JSONResponse:
        status, kind = _status(exc)
        return error(status, kind, exc.reason, getattr(exc, "field", None))

    @app.exception_handler(RequestValidationError)
    async def request_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = location(tuple(first.get("loc", ())))
        return error(
            422, "invalid_input", f"{where or 'body'}: {first.get('msg', 'invalid')}", where or None
        )

    @app.exception_handler(ValidationError)
    async def model_invalid(_: Request, exc: ValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = location(tuple(first.get("loc", ())))
        return error(
            422, "invalid_input", f"{where or 'body'}: {first.get('msg', 'invalid')}", where or None
        )

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        kinds = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        return error(exc.status_code, kinds.get(exc.status_code, "http"), str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error(500, "internal", "internal error; the server log has the details")
