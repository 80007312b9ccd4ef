"""The SDK's errors, and the one place answers that are not a usable 2xx, and httpx's
exceptions, become them (``error_from``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from memq.types import Job

_DELTA_SECONDS = re.compile(r"\d+(\.\d+)?")


class MemqAPIError(Exception):
    """A failed call. ``status`` is the HTTP status (``None`` when no answer came back);
    ``type``, ``message`` and ``field`` come from the API's error body when it sent one;
    ``retry_after_s`` is the server's ``Retry-After`` in seconds (``None`` when it sent none)."""

    def __init__(
        self,
        status: int | None,
        type: str,
        message: str,
        field: str | None = None,
        retry_after_s: float | None = None,
    ):
        super().__init__(status, type, message, field)
        self.status = status
        self.type = type
        self.message = message
        self.field = field
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        prefix = f"{self.status} " if self.status is not None else ""
        return f"{prefix}{self.type}: {self.message}{where}"


class AuthenticationError(MemqAPIError):
    """401: no valid key; 403: a valid key without the right (e.g. an admin route)."""


class NotFoundError(MemqAPIError):
    """404: no such memory, job or batch in the caller's tenant."""


class ValidationError(MemqAPIError):
    """400, 413, 422: the request was refused as sent; ``field`` names the culprit if known.
    Sending it again unchanged will fail again."""


class RateLimitError(MemqAPIError):
    """429: over a per-tenant limit (requests per second, open listing cursors); nothing was
    done. ``retry_after_s`` says when the server will take the call again."""


class UnavailableError(MemqAPIError):
    """The service could not answer now (502/503/504, connection refused, timeout): transient,
    worth retrying later. ``status`` is ``None`` for transport failures; a 503 carries the
    server's ``retry_after_s``."""


class MemqTimeoutError(MemqAPIError):
    """``wait_for`` gave up: the job was still not finished. ``job`` is the last state seen."""

    def __init__(self, message: str, job: Job | None = None):
        super().__init__(None, "timeout", message)
        self.job = job


_ERROR_BY_STATUS: dict[int, type[MemqAPIError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    413: ValidationError,
    422: ValidationError,
    429: RateLimitError,
    502: UnavailableError,
    503: UnavailableError,
    504: UnavailableError,
}


def error_from(failure: httpx.Response | Exception) -> MemqAPIError:
    """The SDK error for an answer that is not a usable 2xx, or for an httpx exception: the
    one place both are translated. Callers ``raise error_from(x) from x`` for exceptions."""
    if isinstance(failure, httpx.Response):
        return _error_from_response(failure)
    if isinstance(failure, httpx.TimeoutException):
        return UnavailableError(None, "timeout", f"{failure.__class__.__name__}: {failure}")
    if isinstance(failure, httpx.TransportError):
        return UnavailableError(None, "transport", f"{failure.__class__.__name__}: {failure}")
    return MemqAPIError(None, "client", f"{failure.__class__.__name__}: {failure}")


def _error_from_response(response: httpx.Response) -> MemqAPIError:
    kind, message, field = _error_body(response)
    if response.is_success:
        return MemqAPIError(response.status_code, "invalid_response", message)
    cls = _ERROR_BY_STATUS.get(response.status_code, MemqAPIError)
    retry_after_s = parse_retry_after(response.headers.get("Retry-After"))
    return cls(response.status_code, kind, message, field, retry_after_s)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds (``"5"``; a decimal is read too) or
    an HTTP-date (the seconds from ``now`` until then, 0 once it is past). ``None`` when the
    header is absent or unreadable."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC by RFC 5322
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


def _error_body(response: httpx.Response) -> tuple[str, str, str | None]:
    """(type, message, field) from memq's error envelope; the raw text when there is none."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        field = error.get("field")
        return str(error.get("type", "http")), error["message"], field if field else None
    text = response.text[:500] or response.reason_phrase
    return "http", text, None
