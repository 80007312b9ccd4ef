"""A small Python SDK for memq's own HTTP API (``/v1/...``; not the mem0 compatibility routes).

``Client`` is synchronous (over ``httpx.Client``), ``AsyncClient`` has the same methods as
coroutines (over ``httpx.AsyncClient``). Both build their requests with the same module-level
functions, decide retries with the same ``RetryPolicy`` and decode answers in the same place,
so they cannot drift apart.

Every method returns a pydantic model of the answer (``memq.types``: ``Job``, ``Memory``,
``SearchHit``, ``MemoryPage``, ``Batch``...), or raises a ``MemqAPIError``:
``AuthenticationError`` (401, 403), ``NotFoundError`` (404), ``ValidationError`` (400, 413, 422),
``RateLimitError`` (429), ``UnavailableError`` (502, 503, 504, and transport failures:
connection refused, timeouts) or the base class for anything else. ``wait_for`` raises
``MemqTimeoutError``. No httpx exception ever escapes: ``error_from`` is the one place they,
and error bodies, are translated.

A 429, a 502/503/504 and a failed connection are retried (``max_retries``, 2 by default) with
exponential backoff and jitter, after the server's ``Retry-After`` when it sends one; a call
is sent again only where a second delivery cannot do a second thing (``Repeat``).

``Client()`` with no arguments reads ``MEMQ_CLIENT_URL`` (default ``http://127.0.0.1:8000``),
``MEMQ_CLIENT_API_KEY``, ``MEMQ_CLIENT_TIMEOUT_S`` and ``MEMQ_CLIENT_MAX_RETRIES``. The prefix
is the SDK's own: the server's settings ignore it, so a client key set on a machine that also
runs memq changes nothing for the server or its CLI.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from email.utils import parsedate_to_datetime
from enum import Enum
from types import TracebackType
from typing import Any, Generic, Literal, Protocol, Self, TypedDict, TypeVar, Unpack, overload
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter
from pydantic import ValidationError as _SchemaError

from memq.types import (
    TERMINAL_STATUSES,
    Batch,
    BatchAccepted,
    Deleted,
    Health,
    HistoryEntry,
    Job,
    JobAccepted,
    JobPage,
    KeyCreated,
    Memory,
    MemoryPage,
    Message,
    Readiness,
    SearchHit,
    SearchHits,
    Shards,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MAX_RETRIES",
    "ENV_TIMEOUT_S",
    "TERMINAL_STATUSES",
    "AsyncClient",
    "AsyncJobPager",
    "AsyncMemoryPager",
    "AsyncPager",
    "AuthenticationError",
    "Backoff",
    "Client",
    "JobPager",
    "JobQuery",
    "MemoryPager",
    "MemqAPIError",
    "MemqTimeoutError",
    "NotFoundError",
    "Pager",
    "RateLimitError",
    "Repeat",
    "RetryPolicy",
    "UnavailableError",
    "ValidationError",
    "error_from",
    "parse_retry_after",
]

_SERVER_WAIT_MAX_S = 300.0  # the API refuses a longer ``wait_s``

# The SDK's own environment variables. MEMQ_CLIENT_* names no section of the server's
# settings (which ignore unknown MEMQ_* names), so they never collide with MEMQ_API_* & co.
ENV_BASE_URL = "MEMQ_CLIENT_URL"
ENV_API_KEY = "MEMQ_CLIENT_API_KEY"
ENV_TIMEOUT_S = "MEMQ_CLIENT_TIMEOUT_S"
ENV_MAX_RETRIES = "MEMQ_CLIENT_MAX_RETRIES"
DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_MAX_RETRIES = 2

_DELTA_SECONDS = re.compile(r"\d+(\.\d+)?")

Messages = str | Mapping[str, Any] | Sequence[Mapping[str, Any]]
JobRef = str | Mapping[str, Any] | JobAccepted | Job
M = TypeVar("M", bound=BaseModel)
N = TypeVar("N", int, float)


# -- errors ----------------------------------------------------------------------------------


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


# -- retries, decided once for both clients --------------------------------------------------

Outcome = httpx.Response | Exception
"""What one try of a call gave: the server's answer, or the exception httpx raised."""


class Repeat(Enum):
    """Which failures a call may be sent again after, by what a second delivery would do."""

    IDEMPOTENT = "idempotent"
    """A second delivery does what the first did: GET, PUT, DELETE, searches, and an add (the
    server makes the same conversation, or the same ``Idempotency-Key``, the same job).
    Retried after a 429, a 502/503/504, a connection that failed, and a timeout or a dropped
    connection after the request may have reached the server."""

    IF_REFUSED = "if_refused"
    """A second delivery could do the thing twice (a new key, a batch under a second id, a
    job's replay). Retried only when the server surely did nothing: a 429 (refused before any
    work) or a connection never made. Every POST not said otherwise."""

    NEVER = "never"
    """Never retried: the health probes report the moment."""


# The server refused the call before doing anything with it: safe to send again, any call.
_REFUSED_STATUSES = frozenset({429})
# The service could not answer now; a POST may have been partly done before it failed.
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
# Raised before a byte of the request left: the server cannot have seen it.
_NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Raised after the request may have arrived: the answer was lost, not necessarily the work.
_ANSWER_LOST_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def worth_repeating(outcome: Outcome, repeat: Repeat) -> bool:
    """Whether a call of kind ``repeat`` may be sent again after ``outcome``; how many times
    and when is ``RetryPolicy``'s business."""
    if repeat is Repeat.NEVER:
        return False
    if isinstance(outcome, httpx.Response):
        if outcome.status_code in _REFUSED_STATUSES:
            return True
        return repeat is Repeat.IDEMPOTENT and outcome.status_code in _UNAVAILABLE_STATUSES
    if isinstance(outcome, _NOT_SENT_ERRORS):
        return True
    return repeat is Repeat.IDEMPOTENT and isinstance(outcome, _ANSWER_LOST_ERRORS)


@dataclass(frozen=True)
class Backoff:
    """The waits between tries. Without ``Retry-After``, retry n (from 0) waits
    ``min(first_s * 2**n, max_s)`` times a random factor in [0.5, 1], so clients that failed
    together do not come back together. A ``Retry-After`` is waited as the server gave it when
    it is at most ``retry_after_max_s``; a longer one ends the retries at once (the error
    carries it in ``retry_after_s``, for the caller to decide)."""

    first_s: float = 0.5
    max_s: float = 8.0
    retry_after_max_s: float = 60.0

    def __post_init__(self) -> None:
        if min(self.first_s, self.max_s, self.retry_after_max_s) < 0:
            raise MemqAPIError(None, "configuration", f"{self}: waits cannot be negative")

    def wait_s(self, retries_done: int, jitter: float) -> float:
        """The wait before retry number ``retries_done`` (0 first), ``jitter`` in [0, 1]."""
        return min(self.first_s * 2.0 ** min(retries_done, 32), self.max_s) * (0.5 + jitter / 2)


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failed call is sent again, and after how long: the one decision the loops
    of ``Client`` and ``AsyncClient`` ask for. ``max_retries=0`` sends every call once."""

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise MemqAPIError(
                None, "configuration", f"max_retries={self.max_retries}: expected 0 or more"
            )

    def delay_s(
        self,
        outcome: Outcome,
        repeat: Repeat,
        retries_done: int,
        *,
        now: datetime | None = None,
        jitter: float | None = None,
    ) -> float | None:
        """Seconds to wait before sending the call again after ``outcome``, or ``None``: the
        outcome is final (a success, a failure not worth repeating, retries spent, or a
        ``Retry-After`` beyond the cap). ``now`` and ``jitter`` are drawn when not given."""
        if retries_done >= self.max_retries or not worth_repeating(outcome, repeat):
            return None
        retry_after_s = None
        if isinstance(outcome, httpx.Response):
            retry_after_s = parse_retry_after(outcome.headers.get("Retry-After"), now)
        if retry_after_s is None:
            return self.backoff.wait_s(retries_done, random.random() if jitter is None else jitter)
        return retry_after_s if retry_after_s <= self.backoff.retry_after_max_s else None


def _answer(outcome: Outcome) -> Any:
    """The JSON of the last try's 2xx answer; else its ``MemqAPIError``."""
    if isinstance(outcome, Exception):
        raise error_from(outcome) from outcome
    return _decode(outcome)


# -- requests, shared by both clients --------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """One HTTP request, independent of the client that sends it."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    repeat: Repeat | None = None  # None: by the method (a POST only if refused)

    @property
    def replay(self) -> Repeat:
        """When this call may be sent again (``Repeat``)."""
        if self.repeat is not None:
            return self.repeat
        return Repeat.IF_REFUSED if self.method == "POST" else Repeat.IDEMPOTENT

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.(Async)Client.request``."""
        params = {k: v for k, v in self.params.items() if v is not None}
        headers = dict(self.headers)
        content = None
        if self.body is not None:
            content = _encode(self.body)
            headers["Content-Type"] = "application/json"
        return {"params": params, "headers": headers, "content": content}


def _encode(value: Any) -> str:
    """JSON with datetimes and dates as ISO-8601 (also inside metadata and filters)."""
    return json.dumps(value, default=_json_default, separators=(",", ":"))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{value.__class__.__name__} is not JSON serialisable")


def _segment(value: str) -> str:
    """A path segment, escaped so an id can never change the route."""
    return quote(value, safe="")


def _scope(user_id: str | None, agent_id: str | None, run_id: str | None) -> dict[str, Any]:
    return {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class AddOptions(TypedDict, total=False):
    """The keyword options of ``add`` (both clients), besides ``wait``: the scope (at least one
    id) and the fields of the add's body, then ``idempotency_key`` (sent as the
    ``Idempotency-Key`` header) and ``wait_timeout_s`` (how long ``wait=True`` waits, 60 s)."""

    user_id: str | None
    agent_id: str | None
    run_id: str | None
    metadata: Mapping[str, Any] | None
    infer: bool
    memory_type: str | None
    prompt: str | None
    timestamp: datetime | int | None
    expiration_date: datetime | None
    webhook_url: str | None
    idempotency_key: str | None
    wait_timeout_s: float


_ADD_OPTIONS = AddOptions.__optional_keys__ | AddOptions.__required_keys__


@dataclass(frozen=True)
class _Add:
    """An add, ready to send: the call, and how long the caller will wait for the job."""

    call: _Call
    wait_timeout_s: float


def _add(messages: Messages, options: AddOptions, wait: bool, http_timeout_s: float) -> _Add:
    """The request of ``add``. It is sent again after a lost answer like a read: without an
    ``idempotency_key`` the server makes the same conversation the same job (a hash of scope,
    messages, timestamp and extraction options), with one the same key the same job. No key is
    made up per call, since that would turn a conversation deliberately posted twice into two
    jobs. ``TypeError`` for an option ``add`` does not have (``AddOptions`` for typed code)."""
    unknown = options.keys() - _ADD_OPTIONS
    if unknown:
        raise TypeError(f"add() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    fields: dict[str, Any] = {"infer": True, **options}
    key: str | None = fields.pop("idempotency_key", None)
    wait_timeout_s: float = fields.pop("wait_timeout_s", 60.0)
    headers = {"Idempotency-Key": key} if key else {}
    wait_s = _server_wait_s(wait_timeout_s, http_timeout_s) if wait else None
    params = {"wait": "true", "wait_s": wait_s} if wait_s else {}
    body = _without_none({**fields, "messages": messages})
    call = _Call("POST", "/v1/memories", params, body, headers, repeat=Repeat.IDEMPOTENT)
    return _Add(call, wait_timeout_s)


def _search_call(query: str, options: Mapping[str, Any]) -> _Call:
    body = _without_none({"query": query, **options})
    return _Call("POST", "/v1/memories/search", body=body, repeat=Repeat.IDEMPOTENT)


def _search_many_call(queries: Sequence[Mapping[str, Any]]) -> _Call:
    body = {"queries": queries}
    return _Call("POST", "/v1/memories/search/batch", body=body, repeat=Repeat.IDEMPOTENT)


class Validity(TypedDict, total=False):
    """Which memories a listing shows by their validity: ``as_of`` what was true then (default:
    what is true now); ``include_replaced`` also those a newer memory replaced."""

    as_of: datetime | None
    include_replaced: bool


def _get_call(memory_id: str, include_sources: bool) -> _Call:
    params = {"include": "sources"} if include_sources else {}
    return _Call("GET", f"/v1/memories/{_segment(memory_id)}", params=params)


def _list_call(
    scope: dict[str, Any],
    filters: Any,
    page_size: int,
    cursor: str | None,
    validity: Validity,
) -> _Call:
    params = {**scope, "page_size": page_size, "cursor": cursor}
    if filters is not None:
        params["filters"] = _encode(filters)
    if (as_of := validity.get("as_of")) is not None:
        params["as_of"] = as_of.isoformat()
    if validity.get("include_replaced"):
        params["include_replaced"] = "true"
    return _Call("GET", "/v1/memories", params=params)


class JobQuery(TypedDict, total=False):
    """The filters of a job listing (GET /v1/jobs): ``status`` one or several of queued,
    running, succeeded, failed, dead; the scope's ids; ``batch_id``; ``since`` (inclusive)
    and ``until`` (exclusive) on the time the job was accepted."""

    status: str | Sequence[str] | None
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    batch_id: str | None
    since: datetime | str | None
    until: datetime | str | None


def _jobs_call(query: JobQuery, limit: int, cursor: str | None) -> _Call:
    params: dict[str, Any] = {k: v for k, v in query.items() if v is not None}
    status = params.get("status")
    if status is not None and not isinstance(status, str):
        params["status"] = ",".join(status)
    for bound in ("since", "until"):
        if isinstance(params.get(bound), datetime):
            params[bound] = params[bound].isoformat()
    return _Call("GET", "/v1/jobs", params={**params, "limit": limit, "cursor": cursor})


def _job_id(job_or_id: JobRef) -> str:
    if isinstance(job_or_id, str):
        return job_or_id
    if isinstance(job_or_id, JobAccepted | Job):
        return job_or_id.job_id
    return str(job_or_id["job_id"])


def _server_wait_s(wait_timeout_s: float, http_timeout_s: float) -> float | None:
    """How long to let the server hold an add: at most half the HTTP timeout, so the read
    never times out first; ``None`` when there is no time for it (the SDK polls instead)."""
    wait_s = min(wait_timeout_s, http_timeout_s / 2, _SERVER_WAIT_MAX_S)
    return wait_s if wait_s >= 0.1 else None


def _parse(model: type[M], value: Any) -> M:
    """``value`` (decoded JSON) as ``model``; an answer of another shape is an
    ``invalid_response`` error, never a pydantic exception."""
    try:
        return model.model_validate(value)
    except _SchemaError as exc:
        raise _invalid(model.__name__, value, exc) from exc


def _parse_list(model: type[M], value: Any) -> list[M]:
    """``value`` as a list of ``model``, with the same error contract as ``_parse``."""
    try:
        return TypeAdapter(list[model]).validate_python(value)  # type: ignore[valid-type]
    except _SchemaError as exc:
        raise _invalid(f"list of {model.__name__}", value, exc) from exc


def _invalid(what: str, value: Any, exc: _SchemaError) -> MemqAPIError:
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
    return MemqAPIError(
        None, "invalid_response", f"expected {what}, got {value!r:.200} ({problems})"
    )


def _results(value: Any) -> Any:
    """The ``results`` member of an answer object (search, batch search)."""
    if not isinstance(value, dict) or "results" not in value:
        raise MemqAPIError(None, "invalid_response", f"expected results, got {value!r:.200}")
    return value["results"]


def _search_hits(value: Any) -> SearchHits:
    """A search's answer: its hits, with the partial flag and the shard counts."""
    hits = _parse_list(SearchHit, _results(value))
    shards = value.get("shards")
    return SearchHits(
        hits,
        partial=value.get("partial") is True,
        shards=None if shards is None else _parse(Shards, shards),
    )


def _search_many_hits(value: Any) -> list[SearchHits]:
    """A batch search's answer: one ``SearchHits`` per query, in order, each flagged from
    its own shard counts."""
    answers = _results(value)
    if not isinstance(answers, list):
        raise MemqAPIError(None, "invalid_response", f"expected lists, got {answers!r:.200}")
    counts = _parse_list(Shards, value.get("shards") or [])
    if counts and len(counts) != len(answers):
        raise MemqAPIError(
            None, "invalid_response", f"{len(counts)} shard counts for {len(answers)} queries"
        )
    found = []
    for i, hits in enumerate(answers):
        shards = counts[i] if counts else None
        partial = shards.partial if shards else value.get("partial") is True
        found.append(SearchHits(_parse_list(SearchHit, hits), partial=partial, shards=shards))
    return found


def _accepted_or_job(value: Any) -> JobAccepted | Job:
    """An add's answer: the finished job when the server waited for it, else the acceptance."""
    if isinstance(value, dict) and "created" not in value and "attempts" in value:
        return _parse(Job, value)
    return _parse(JobAccepted, value)


def _decode(response: httpx.Response) -> Any:
    """The JSON of a 2xx answer; anything else raises the matching ``MemqAPIError``."""
    if not response.is_success:
        raise error_from(response)
    try:
        return response.json()
    except ValueError as exc:
        raise error_from(response) from exc


def _timed_out(job_id: str, timeout_s: float, job: Job | None) -> MemqTimeoutError:
    status = job.status if job else "unknown"
    return MemqTimeoutError(f"job {job_id} still {status} after {timeout_s:g}s", job)


def _headers(api_key: str) -> dict[str, str]:
    from memq import __version__

    return {"Authorization": f"Bearer {api_key}", "User-Agent": f"memq-python/{__version__}"}


@dataclass(frozen=True)
class _Connection:
    """Where and how to reach the API, from the arguments or else the environment."""

    base_url: str
    api_key: str
    timeout_s: float
    retry: RetryPolicy


def _connection(
    base_url: str | None,
    api_key: str | None,
    timeout_s: float | None,
    max_retries: int | None,
    backoff: Backoff | None,
) -> _Connection:
    """Explicit arguments win; else ``MEMQ_CLIENT_URL``, ``MEMQ_CLIENT_API_KEY``,
    ``MEMQ_CLIENT_TIMEOUT_S`` and ``MEMQ_CLIENT_MAX_RETRIES``. No key anywhere, or a value
    out of range, is a ``MemqAPIError`` of type ``configuration`` (raised at construction, not
    at the first call)."""
    key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
    if not key:
        raise MemqAPIError(
            None, "configuration", f"no API key: pass api_key=... or set {ENV_API_KEY}"
        )
    if max_retries is None:
        max_retries = _from_env(ENV_MAX_RETRIES, DEFAULT_MAX_RETRIES, _count, "a count, 0 or more")
    if timeout_s is None:
        timeout_s = _from_env(ENV_TIMEOUT_S, 30.0, _positive, "seconds, a number > 0")
    return _Connection(
        base_url=base_url or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL,
        api_key=key,
        timeout_s=timeout_s,
        retry=RetryPolicy(max_retries, backoff or Backoff()),
    )


def _from_env(name: str, default: N, parse: Callable[[str], N | None], expected: str) -> N:
    """The environment variable ``name`` read by ``parse`` (``None`` or ``ValueError`` when
    it is out of range or unreadable: a ``configuration`` error); ``default`` when unset."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None:
        raise MemqAPIError(None, "configuration", f"{name}={raw!r}: expected {expected}")
    return value


def _positive(raw: str) -> float | None:
    value = float(raw)
    return value if value > 0 else None


def _count(raw: str) -> int | None:
    value = int(raw)
    return value if value >= 0 else None


# -- paging ----------------------------------------------------------------------------------


ItemT_co = TypeVar("ItemT_co", covariant=True)
PageT = TypeVar("PageT", bound="_Page[Any]")


class _Page(Protocol[ItemT_co]):
    """What a pager reads of a page: its items and the cursor of the next."""

    @property
    def results(self) -> Sequence[ItemT_co]: ...

    @property
    def next_cursor(self) -> str | None: ...


class Pager(Generic[ItemT_co, PageT]):
    """Every item of a listing, fetched page by page as it is consumed: iterate it for the
    items, or call ``pages()`` for the page objects themselves. Each iteration starts again
    from the first page; errors are raised during iteration."""

    def __init__(self, fetch: Callable[[str | None], PageT]) -> None:
        self._fetch = fetch

    def pages(self) -> Iterator[PageT]:
        """The pages in order, until one has no ``next_cursor`` (or no results)."""
        cursor: str | None = None
        while True:
            page = self._fetch(cursor)
            yield page
            cursor = page.next_cursor
            if not cursor or not page.results:
                return

    def __iter__(self) -> Iterator[ItemT_co]:
        for page in self.pages():
            yield from page.results


class AsyncPager(Generic[ItemT_co, PageT]):
    """``Pager`` for ``AsyncClient``: ``async for item in pager``, or
    ``async for page in pager.pages()``."""

    def __init__(self, fetch: Callable[[str | None], Awaitable[PageT]]) -> None:
        self._fetch = fetch

    async def pages(self) -> AsyncIterator[PageT]:
        """See ``Pager.pages``."""
        cursor: str | None = None
        while True:
            page = await self._fetch(cursor)
            yield page
            cursor = page.next_cursor
            if not cursor or not page.results:
                return

    async def _items(self) -> AsyncIterator[ItemT_co]:
        async for page in self.pages():
            for item in page.results:
                yield item

    def __aiter__(self) -> AsyncIterator[ItemT_co]:
        return self._items()


MemoryPager = Pager[Memory, MemoryPage]
AsyncMemoryPager = AsyncPager[Memory, MemoryPage]
JobPager = Pager[Job, JobPage]
AsyncJobPager = AsyncPager[Job, JobPage]


# -- the clients -----------------------------------------------------------------------------


class _Retrying:
    """What the two clients share besides the module's functions: their ``RetryPolicy``."""

    _retry: RetryPolicy

    @property
    def max_retries(self) -> int:
        """How many times a failed call is sent again (``Repeat`` says which failures)."""
        return self._retry.max_retries

    def with_options(
        self, *, max_retries: int | None = None, backoff: Backoff | None = None
    ) -> Self:
        """This client with other retry settings, for one call or one part of a program
        (``client.with_options(max_retries=0).search(...)``). The copy shares the connection
        pool, so it is cheap to make; closing either closes both."""
        clone = copy.copy(self)
        clone._retry = RetryPolicy(
            self._retry.max_retries if max_retries is None else max_retries,
            backoff or self._retry.backoff,
        )
        return clone


# -- the synchronous client ------------------------------------------------------------------


class Client(_Retrying):
    """memq over HTTP, synchronously. Use as a context manager, or call ``close()``.

    ``base_url``, ``api_key``, ``timeout_s`` and ``max_retries`` default to
    ``MEMQ_CLIENT_URL``, ``MEMQ_CLIENT_API_KEY``, ``MEMQ_CLIENT_TIMEOUT_S`` (30 s) and
    ``MEMQ_CLIENT_MAX_RETRIES`` (2). ``timeout_s`` bounds each HTTP request (each try);
    ``max_retries`` is how many times a call is sent again after a 429, a 502/503/504 or a
    connection failure (``Repeat`` says which calls after which; 0: never), waiting as
    ``backoff`` says; ``transport`` replaces the network (tests pass an ``httpx.MockTransport``).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = None,
        transport: httpx.BaseTransport | None = None,
        *,
        max_retries: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        conn = _connection(base_url, api_key, timeout_s, max_retries, backoff)
        self.base_url = conn.base_url
        self._timeout_s = conn.timeout_s
        self._retry = conn.retry
        self._http = httpx.Client(
            base_url=conn.base_url,
            headers=_headers(conn.api_key),
            timeout=conn.timeout_s,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the connection pool; the client is unusable afterwards."""
        self._http.close()

    def _send(self, call: _Call) -> Any:
        """``call``'s answer, tried again as ``RetryPolicy.delay_s`` says."""
        options, retries_done = call.options(), 0
        while True:
            outcome = self._try(call, options)
            delay_s = self._retry.delay_s(outcome, call.replay, retries_done)
            if delay_s is None:
                return _answer(outcome)
            time.sleep(delay_s)
            retries_done += 1

    def _try(self, call: _Call, options: dict[str, Any]) -> Outcome:
        try:
            return self._http.request(call.method, call.path, **options)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return exc

    # jobs

    @overload
    def add(
        self, messages: Messages, *, wait: Literal[False] = False, **options: Unpack[AddOptions]
    ) -> JobAccepted: ...

    @overload
    def add(
        self, messages: Messages, *, wait: Literal[True], **options: Unpack[AddOptions]
    ) -> Job: ...

    @overload
    def add(
        self, messages: Messages, *, wait: bool, **options: Unpack[AddOptions]
    ) -> JobAccepted | Job: ...

    def add(
        self, messages: Messages, *, wait: bool = False, **options: Unpack[AddOptions]
    ) -> JobAccepted | Job:
        """Queue a conversation (POST /v1/memories). Returns a ``JobAccepted`` (``job_id``,
        ``status``, ``status_url``, ``created``); with ``wait=True``, the finished ``Job``
        instead (whatever its status), or ``MemqTimeoutError`` after ``wait_timeout_s``.

        ``options`` (``AddOptions``): ``user_id``, ``agent_id``, ``run_id`` (at least one),
        ``metadata``, ``infer`` (True), ``memory_type``, ``prompt``, ``timestamp`` (a datetime
        or Unix seconds), ``expiration_date``, ``webhook_url``, ``idempotency_key`` and
        ``wait_timeout_s`` (60). The same conversation, or the same ``idempotency_key``, always
        answers with the same job, which is why an add is retried like a read; an add that was
        retried after its answer was lost may say ``created=False`` for the job it made."""
        add = _add(messages, options, wait, self._timeout_s)
        deadline = time.monotonic() + add.wait_timeout_s
        if not wait:
            return _parse(JobAccepted, self._send(add.call))
        job = _accepted_or_job(self._send(add.call))
        if isinstance(job, Job) and job.finished:
            return job
        return self.wait_for(job, timeout_s=max(deadline - time.monotonic(), 0.0))

    def job(self, job_id: str) -> Job:
        """The job (GET /v1/jobs/{id}): status, phase, counts (with LLM tokens), timings,
        results, errors."""
        return _parse(Job, self._send(_Call("GET", f"/v1/jobs/{_segment(job_id)}")))

    def retry(self, job_id: str) -> Job:
        """Replay a failed or dead job from its recorded request; returns the job."""
        return _parse(Job, self._send(_Call("POST", f"/v1/jobs/{_segment(job_id)}/retry")))

    def jobs_page(
        self, *, limit: int = 50, cursor: str | None = None, **query: Unpack[JobQuery]
    ) -> JobPage:
        """One page of the tenant's jobs, newest first (GET /v1/jobs); pass the page's
        ``next_cursor`` with the same filters for the next one."""
        return _parse(JobPage, self._send(_jobs_call(query, limit, cursor)))

    def jobs(self, *, limit: int = 50, **query: Unpack[JobQuery]) -> JobPager:
        """Every job matching the filters, newest first, as a ``Pager``: iterate it for
        ``Job`` objects (``limit`` a page, fetched as it is consumed) or walk ``.pages()``.
        ``client.jobs(status="failed")`` lists what to look at or replay."""

        def fetch(cursor: str | None) -> JobPage:
            return self.jobs_page(limit=limit, cursor=cursor, **query)

        return JobPager(fetch)

    def wait_for(self, job_or_id: JobRef, timeout_s: float = 60.0, poll_s: float = 0.2) -> Job:
        """Poll the job until it is succeeded, failed or dead and return it (a failed job is
        returned, not raised: read ``status``). ``MemqTimeoutError`` after ``timeout_s``."""
        job_id = _job_id(job_or_id)
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            remaining = deadline - time.monotonic()
            if job.finished:
                return job
            if remaining <= 0:
                raise _timed_out(job_id, timeout_s, job)
            time.sleep(min(poll_s, remaining))

    def add_batch(self, items: Sequence[Mapping[str, Any]]) -> BatchAccepted:
        """Queue many conversations (POST /v1/batches), each item an ``add`` body; returns
        ``batch_id``, ``status_url`` and the accepted ``jobs``. A bad item queues nothing."""
        return _parse(
            BatchAccepted, self._send(_Call("POST", "/v1/batches", body={"items": items}))
        )

    def batch(self, batch_id: str) -> Batch:
        """Counts of the batch's jobs per status: ``batch_id``, ``total``, ``counts``."""
        return _parse(Batch, self._send(_Call("GET", f"/v1/batches/{_segment(batch_id)}")))

    # memories

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int = 20,
        threshold: float | None = None,
        rerank: bool = False,
        explain: bool = False,
        show_expired: bool = False,
        reference_time: datetime | None = None,
        as_of: datetime | None = None,
        include_replaced: bool = False,
    ) -> SearchHits:
        """Hybrid search in a scope (at least one id); hits best first. ``reference_time`` is
        the moment relative times in the query ("last week") are read against (default: the
        server's now). Memories a newer one replaced are left out unless ``include_replaced``;
        ``as_of`` answers with what was true then."""
        options = {
            **_scope(user_id, agent_id, run_id),
            "filters": filters,
            "top_k": top_k,
            "threshold": threshold,
            "rerank": rerank,
            "explain": explain,
            "show_expired": show_expired,
            "reference_time": reference_time,
            "as_of": as_of,
            "include_replaced": include_replaced,
        }
        call = _search_call(query, options)
        return _search_hits(self._send(call))

    def search_many(self, queries: Sequence[Mapping[str, Any]]) -> list[SearchHits]:
        """Several searches (each a ``search`` body with ``query``), answered in order, each
        with its own ``partial`` flag."""
        call = _search_many_call(queries)
        return _search_many_hits(self._send(call))

    def get(self, memory_id: str, *, include_sources: bool = False) -> Memory:
        """One memory; ``NotFoundError`` when it does not exist (or was deleted). With
        ``include_sources``, its ``provenance``: the messages it came from and its job."""
        return _parse(Memory, self._send(_get_call(memory_id, include_sources)))

    def page(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        **validity: Unpack[Validity],
    ) -> MemoryPage:
        """One page of the scope's memories, oldest first (GET /v1/memories); pass the
        page's ``next_cursor`` for the next one."""
        call = _list_call(_scope(user_id, agent_id, run_id), filters, page_size, cursor, validity)
        return _parse(MemoryPage, self._send(call))

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        page_size: int = 100,
        **validity: Unpack[Validity],
    ) -> MemoryPager:
        """Every memory of the scope, oldest first, as a ``MemoryPager``: iterate it for
        ``Memory`` objects (pages are fetched as it is consumed) or walk ``.pages()``."""

        def fetch(cursor: str | None) -> MemoryPage:
            return self.page(
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                filters=filters,
                page_size=page_size,
                cursor=cursor,
                **validity,
            )

        return MemoryPager(fetch)

    def update(
        self, memory_id: str, *, text: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Memory:
        """New text (re-embedded) and/or metadata; returns the updated memory."""
        body = _without_none({"text": text, "metadata": metadata})
        call = _Call("PUT", f"/v1/memories/{_segment(memory_id)}", body=body)
        return _parse(Memory, self._send(call))

    def delete(self, memory_id: str) -> Message:
        """Delete one memory (its history keeps a DELETE row). A delete sent again because its
        answer was lost answers ``NotFoundError`` when the first had done it."""
        return _parse(Message, self._send(_Call("DELETE", f"/v1/memories/{_segment(memory_id)}")))

    def delete_all(
        self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Deleted:
        """Delete every memory of a scope (at least one id); ``deleted`` is the count."""
        call = _Call("DELETE", "/v1/memories", params=_scope(user_id, agent_id, run_id))
        return _parse(Deleted, self._send(call))

    def history(self, memory_id: str) -> list[HistoryEntry]:
        """ADD, UPDATE and DELETE events of a memory, oldest first."""
        call = _Call("GET", f"/v1/memories/{_segment(memory_id)}/history")
        return _parse_list(HistoryEntry, self._send(call))

    # admin and health

    def create_key(self, tenant: str, name: str = "", admin: bool = False) -> KeyCreated:
        """A new API key for ``tenant`` (needs an admin key): ``id``, ``tenant``, ``key``."""
        body = {"tenant": tenant, "name": name, "admin": admin}
        return _parse(KeyCreated, self._send(_Call("POST", "/v1/admin/keys", body=body)))

    def revoke_key(self, key_id: str) -> Message:
        """Revoke a key by its id (needs an admin key)."""
        call = _Call("DELETE", f"/v1/admin/keys/{_segment(key_id)}")
        return _parse(Message, self._send(call))

    def healthz(self) -> Health:
        """The API process is up: ``status`` is ``ok``."""
        return _parse(Health, self._send(_Call("GET", "/healthz", repeat=Repeat.NEVER)))

    def readyz(self) -> Readiness:
        """Elasticsearch and Redis reachable; ``UnavailableError`` (the answer as its message)
        when one is not."""
        return _parse(Readiness, self._send(_Call("GET", "/readyz", repeat=Repeat.NEVER)))


# -- the asynchronous client -----------------------------------------------------------------


class AsyncClient(_Retrying):
    """memq over HTTP with ``async`` methods; the same API, contracts and environment
    variables as ``Client``. Use as an async context manager, or ``await aclose()``
    (``close()`` is an alias)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        max_retries: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        conn = _connection(base_url, api_key, timeout_s, max_retries, backoff)
        self.base_url = conn.base_url
        self._timeout_s = conn.timeout_s
        self._retry = conn.retry
        self._http = httpx.AsyncClient(
            base_url=conn.base_url,
            headers=_headers(conn.api_key),
            timeout=conn.timeout_s,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Release the connection pool; the client is unusable afterwards."""
        await self._http.aclose()

    aclose = close

    async def _send(self, call: _Call) -> Any:
        """See ``Client._send``."""
        options, retries_done = call.options(), 0
        while True:
            outcome = await self._try(call, options)
            delay_s = self._retry.delay_s(outcome, call.replay, retries_done)
            if delay_s is None:
                return _answer(outcome)
            await asyncio.sleep(delay_s)
            retries_done += 1

    async def _try(self, call: _Call, options: dict[str, Any]) -> Outcome:
        try:
            return await self._http.request(call.method, call.path, **options)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return exc

    # jobs

    @overload
    async def add(
        self, messages: Messages, *, wait: Literal[False] = False, **options: Unpack[AddOptions]
    ) -> JobAccepted: ...

    @overload
    async def add(
        self, messages: Messages, *, wait: Literal[True], **options: Unpack[AddOptions]
    ) -> Job: ...

    @overload
    async def add(
        self, messages: Messages, *, wait: bool, **options: Unpack[AddOptions]
    ) -> JobAccepted | Job: ...

    async def add(
        self, messages: Messages, *, wait: bool = False, **options: Unpack[AddOptions]
    ) -> JobAccepted | Job:
        """See ``Client.add``."""
        add = _add(messages, options, wait, self._timeout_s)
        deadline = time.monotonic() + add.wait_timeout_s
        if not wait:
            return _parse(JobAccepted, await self._send(add.call))
        job = _accepted_or_job(await self._send(add.call))
        if isinstance(job, Job) and job.finished:
            return job
        return await self.wait_for(job, timeout_s=max(deadline - time.monotonic(), 0.0))

    async def job(self, job_id: str) -> Job:
        """See ``Client.job``."""
        return _parse(Job, await self._send(_Call("GET", f"/v1/jobs/{_segment(job_id)}")))

    async def retry(self, job_id: str) -> Job:
        """See ``Client.retry``."""
        call = _Call("POST", f"/v1/jobs/{_segment(job_id)}/retry")
        return _parse(Job, await self._send(call))

    async def jobs_page(
        self, *, limit: int = 50, cursor: str | None = None, **query: Unpack[JobQuery]
    ) -> JobPage:
        """See ``Client.jobs_page``."""
        return _parse(JobPage, await self._send(_jobs_call(query, limit, cursor)))

    def jobs(self, *, limit: int = 50, **query: Unpack[JobQuery]) -> AsyncJobPager:
        """See ``Client.jobs``; iterate with ``async for`` (not awaited itself)."""

        async def fetch(cursor: str | None) -> JobPage:
            return await self.jobs_page(limit=limit, cursor=cursor, **query)

        return AsyncJobPager(fetch)

    async def wait_for(
        self, job_or_id: JobRef, timeout_s: float = 60.0, poll_s: float = 0.2
    ) -> Job:
        """See ``Client.wait_for``."""
        job_id = _job_id(job_or_id)
        deadline = time.monotonic() + timeout_s
        while True:
            job = await self.job(job_id)
            remaining = deadline - time.monotonic()
            if job.finished:
                return job
            if remaining <= 0:
                raise _timed_out(job_id, timeout_s, job)
            await asyncio.sleep(min(poll_s, remaining))

    async def add_batch(self, items: Sequence[Mapping[str, Any]]) -> BatchAccepted:
        """See ``Client.add_batch``."""
        call = _Call("POST", "/v1/batches", body={"items": items})
        return _parse(BatchAccepted, await self._send(call))

    async def batch(self, batch_id: str) -> Batch:
        """See ``Client.batch``."""
        return _parse(Batch, await self._send(_Call("GET", f"/v1/batches/{_segment(batch_id)}")))

    # memories

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int = 20,
        threshold: float | None = None,
        rerank: bool = False,
        explain: bool = False,
        show_expired: bool = False,
        reference_time: datetime | None = None,
        as_of: datetime | None = None,
        include_replaced: bool = False,
    ) -> SearchHits:
        """See ``Client.search``."""
        options = {
            **_scope(user_id, agent_id, run_id),
            "filters": filters,
            "top_k": top_k,
            "threshold": threshold,
            "rerank": rerank,
            "explain": explain,
            "show_expired": show_expired,
            "reference_time": reference_time,
            "as_of": as_of,
            "include_replaced": include_replaced,
        }
        call = _search_call(query, options)
        return _search_hits(await self._send(call))

    async def search_many(self, queries: Sequence[Mapping[str, Any]]) -> list[SearchHits]:
        """See ``Client.search_many``."""
        call = _search_many_call(queries)
        return _search_many_hits(await self._send(call))

    async def get(self, memory_id: str, *, include_sources: bool = False) -> Memory:
        """See ``Client.get``."""
        return _parse(Memory, await self._send(_get_call(memory_id, include_sources)))

    async def page(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        page_size: int = 100,
        cursor: str | None = None,
        **validity: Unpack[Validity],
    ) -> MemoryPage:
        """See ``Client.page``."""
        call = _list_call(_scope(user_id, agent_id, run_id), filters, page_size, cursor, validity)
        return _parse(MemoryPage, await self._send(call))

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        page_size: int = 100,
        **validity: Unpack[Validity],
    ) -> AsyncMemoryPager:
        """See ``Client.get_all``; iterate with ``async for`` (not awaited itself)."""

        async def fetch(cursor: str | None) -> MemoryPage:
            return await self.page(
                user_id=user_id,
                agent_id=agent_id,
                run_id=run_id,
                filters=filters,
                page_size=page_size,
                cursor=cursor,
                **validity,
            )

        return AsyncMemoryPager(fetch)

    async def update(
        self, memory_id: str, *, text: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Memory:
        """See ``Client.update``."""
        body = _without_none({"text": text, "metadata": metadata})
        call = _Call("PUT", f"/v1/memories/{_segment(memory_id)}", body=body)
        return _parse(Memory, await self._send(call))

    async def delete(self, memory_id: str) -> Message:
        """See ``Client.delete``."""
        call = _Call("DELETE", f"/v1/memories/{_segment(memory_id)}")
        return _parse(Message, await self._send(call))

    async def delete_all(
        self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> Deleted:
        """See ``Client.delete_all``."""
        call = _Call("DELETE", "/v1/memories", params=_scope(user_id, agent_id, run_id))
        return _parse(Deleted, await self._send(call))

    async def history(self, memory_id: str) -> list[HistoryEntry]:
        """See ``Client.history``."""
        call = _Call("GET", f"/v1/memories/{_segment(memory_id)}/history")
        return _parse_list(HistoryEntry, await self._send(call))

    # admin and health

    async def create_key(self, tenant: str, name: str = "", admin: bool = False) -> KeyCreated:
        """See ``Client.create_key``."""
        body = {"tenant": tenant, "name": name, "admin": admin}
        return _parse(KeyCreated, await self._send(_Call("POST", "/v1/admin/keys", body=body)))

    async def revoke_key(self, key_id: str) -> Message:
        """See ``Client.revoke_key``."""
        call = _Call("DELETE", f"/v1/admin/keys/{_segment(key_id)}")
        return _parse(Message, await self._send(call))

    async def healthz(self) -> Health:
        """See ``Client.healthz``."""
        return _parse(Health, await self._send(_Call("GET", "/healthz", repeat=Repeat.NEVER)))

    async def readyz(self) -> Readiness:
        """See ``Client.readyz``."""
        call = _Call("GET", "/readyz", repeat=Repeat.NEVER)
        return _parse(Readiness, await self._send(call))
