"""memq's errors as HTTP answers: always JSON ``{"error": {"type", "message", "field"},
"detail": message}`` (``detail`` is where mem0 clients read the message), never a stack trace.
The one place exceptions become status codes. A 500 (a bug) names the request id under which
the server logged it, in its message and as ``error.request_id``."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from api.deps import ForbiddenError, UnauthorizedError
from api.limits import RateLimitedError
from api.request_ids import HEADER, request_id_of
from pipeline.errors import (
    ConflictError,
    InvalidInputError,
    MemqError,
    NotFoundError,
    NotServedError,
    PermanentError,
    RetriesExhaustedError,
    TransientError,
)
from pipeline.features.chat import SignatureError
from pipeline.features.usage import BudgetSpentError

log = logging.getLogger("memq.api")


def error(
    status: int,
    kind: str,
    message: str,
    field: str | None = None,
    retry_after_s: int = 5,
    *,
    request_id: str | None = None,
) -> JSONResponse:
    """The answer for an error; with ``request_id``, the body and the headers name it."""
    details: dict[str, Any] = {"type": kind, "message": message, "field": field}
    headers = {"Retry-After": str(retry_after_s)} if status in (429, 503) else {}
    if request_id is not None:
        details["request_id"] = request_id
        headers[HEADER] = request_id
    body = {"error": details, "detail": message}
    return JSONResponse(status_code=status, content=body, headers=headers or None)


def internal_error(request: Request) -> JSONResponse:
    """The answer for a bug, after it was logged: no detail of it, only the request id under
    which the log has them."""
    request_id = request_id_of(request)
    where = f" under request id {request_id}" if request_id else ""
    message = f"internal error; the server log has the details{where}"
    return error(500, "internal", message, request_id=request_id)


def log_unexpected(request: Request) -> None:
    """Log the exception being handled, with the request's method, path and id."""
    request_id = request_id_of(request)
    extra = {"request_id": request_id} if request_id else None
    log.exception("unexpected error on %s %s", request.method, request.url.path, extra=extra)


def _status(exc: MemqError) -> tuple[int, str]:
    table: list[tuple[type[MemqError], int, str]] = [
        (UnauthorizedError, 401, "unauthorized"),
        (ForbiddenError, 403, "forbidden"),
        (SignatureError, 401, "bad_signature"),
        (RateLimitedError, 429, "rate_limited"),
        (BudgetSpentError, 429, "budget_spent"),
        (NotFoundError, 404, "not_found"),
        (ConflictError, 409, "conflict"),
        (InvalidInputError, 422, "invalid_input"),
        (NotServedError, 501, "not_served"),
        (TransientError, 503, "unavailable"),
        (RetriesExhaustedError, 503, "unavailable"),
        (PermanentError, 400, "bad_request"),
    ]
    return next(
        ((status, kind) for cls, status, kind in table if isinstance(exc, cls)), (500, "internal")
    )


_ORIGINS = ("body", "query", "path", "header")
_BRANCH = re.compile(r"[\[(]|^(str|int|float|bool|dict|list|none|json-or-python)$")


def location(loc: Sequence[int | str]) -> str:
    """A pydantic error location as the dotted field a caller wrote: the request part
    (body, query…) and the names pydantic gives union branches are left out."""
    parts = list(loc[1:] if loc and loc[0] in _ORIGINS else loc)
    return ".".join(str(p) for p in parts if not (isinstance(p, str) and _BRANCH.search(p)))


def most_specific(errors: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Of a union's alternatives, the error that got furthest into the input."""
    return max(errors, key=lambda e: len(location(tuple(e.get("loc", ())))))


def validation_error(errors: Sequence[Mapping[str, Any]]) -> JSONResponse:
    if any(e.get("type") == "json_invalid" for e in errors):
        return error(422, "invalid_input", "the body is not valid JSON", "body")
    chosen = most_specific(errors)
    where = location(tuple(chosen.get("loc", ())))
    return error(
        422, "invalid_input", f"{where or 'body'}: {chosen.get('msg', 'invalid')}", where or None
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(MemqError)
    async def memq_error(request: Request, exc: MemqError) -> JSONResponse:
        status, kind = _status(exc)
        if status == 500:  # an error of ours no caller can act on: logged, and named by its id
            log_unexpected(request)
        limited = isinstance(exc, RateLimitedError | BudgetSpentError)
        retry_after_s = getattr(exc, "retry_after_s", 5) if limited else 5
        request_id = request_id_of(request) if status == 500 else None
        field = getattr(exc, "field", None)
        return error(status, kind, exc.reason, field, retry_after_s, request_id=request_id)

    @app.exception_handler(RequestValidationError)
    async def request_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc.errors())

    @app.exception_handler(ValidationError)
    async def model_invalid(_: Request, exc: ValidationError) -> JSONResponse:
        return validation_error(exc.errors())

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        kinds = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        return error(exc.status_code, kinds.get(exc.status_code, "http"), str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # reached only by a bug outside ``RequestCounter`` (which answers the others), in the
        # server's outermost layer: the request's log context has ended, so the id goes as extra
        log_unexpected(request)
        return internal_error(request)
