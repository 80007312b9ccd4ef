"""A small Python SDK for memq's own HTTP API (``/v1/...``; not the mem0 compatibility routes).

``Client`` is synchronous (over ``httpx.Client``), ``AsyncClient`` has the same methods as
coroutines (over ``httpx.AsyncClient``). Both build their requests with the same module-level
functions and decode answers in the same place, so they cannot drift apart.

Every method returns the decoded JSON of a 2xx answer, or raises a ``MemqAPIError``:
``AuthenticationError`` (401, 403), ``NotFoundError`` (404), ``ValidationError`` (400, 413, 422),
``UnavailableError`` (502, 503, 504, and transport failures: connection refused, timeouts) or
the base class for anything else. ``wait_for`` raises ``MemqTimeoutError``. No httpx exception
ever escapes: ``error_from`` is the one place they, and error bodies, are translated.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from pipeline.jobs import TERMINAL_STATUSES

__all__ = [
    "TERMINAL_STATUSES",
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "MemqAPIError",
    "MemqTimeoutError",
    "NotFoundError",
    "UnavailableError",
    "ValidationError",
    "error_from",
]

_SERVER_WAIT_MAX_S = 300.0  # the API refuses a longer ``wait_s``

Messages = str | Mapping[str, Any] | Sequence[Mapping[str, Any]]
JobRef = str | Mapping[str, Any]


# -- errors ----------------------------------------------------------------------------------


class MemqAPIError(Exception):
    """A failed call. ``status`` is the HTTP status (``None`` when no answer came back);
    ``type``, ``message`` and ``field`` come from the API's error body when it sent one."""

    def __init__(self, status: int | None, type: str, message: str, field: str | None = None):
        super().__init__(status, type, message, field)
        self.status = status
        self.type = type
        self.message = message
        self.field = field

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


class UnavailableError(MemqAPIError):
    """The service could not answer now (502/503/504, connection refused, timeout): transient,
    worth retrying later. ``status`` is ``None`` for transport failures."""


class MemqTimeoutError(MemqAPIError):
    """``wait_for`` gave up: the job was still not finished. ``job`` is the last state seen."""

    def __init__(self, message: str, job: Mapping[str, Any] | None = None):
        super().__init__(None, "timeout", message)
        self.job = dict(job) if job is not None else None


_ERROR_BY_STATUS: dict[int, type[MemqAPIError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    413: ValidationError,
    422: ValidationError,
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
    return cls(response.status_code, kind, message, field)


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


# -- requests, shared by both clients --------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """One HTTP request, independent of the client that sends it."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

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


def _add_call(body: dict[str, Any], idempotency_key: str | None, wait_s: float | None) -> _Call:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    params = {"wait": "true", "wait_s": wait_s} if wait_s else {}
    return _Call("POST", "/v1/memories", params=params, body=_without_none(body), headers=headers)


def _search_body(query: str, options: Mapping[str, Any]) -> dict[str, Any]:
    return _without_none({"query": query, **options})


def _list_call(scope: dict[str, Any], filters: Any, page_size: int, cursor: str | None) -> _Call:
    params = {**scope, "page_size": page_size, "cursor": cursor}
    if filters is not None:
        params["filters"] = _encode(filters)
    return _Call("GET", "/v1/memories", params=params)


def _job_id(job_or_id: JobRef) -> str:
    return job_or_id if isinstance(job_or_id, str) else str(job_or_id["job_id"])


def _server_wait_s(wait_timeout_s: float, http_timeout_s: float) -> float | None:
    """How long to let the server hold an add: at most half the HTTP timeout, so the read
    never times out first; ``None`` when there is no time for it (the SDK polls instead)."""
    wait_s = min(wait_timeout_s, http_timeout_s / 2, _SERVER_WAIT_MAX_S)
    return wait_s if wait_s >= 0.1 else None


def _as_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MemqAPIError(None, "invalid_response", f"expected a JSON object, got {value!r:.200}")
    return value


def _as_list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise MemqAPIError(None, "invalid_response", f"expected a JSON array, got {value!r:.200}")
    return value


def _decode(response: httpx.Response) -> Any:
    """The JSON of a 2xx answer; anything else raises the matching ``MemqAPIError``."""
    if not response.is_success:
        raise error_from(response)
    try:
        return response.json()
    except ValueError as exc:
        raise error_from(response) from exc


def _finished(job: dict[str, Any]) -> bool:
    return job.get("status") in TERMINAL_STATUSES


def _timed_out(job_id: str, timeout_s: float, job: dict[str, Any] | None) -> MemqTimeoutError:
    status = job.get("status") if job else "unknown"
    return MemqTimeoutError(f"job {job_id} still {status} after {timeout_s:g}s", job)


def _headers(api_key: str) -> dict[str, str]:
    from memq import __version__

    return {"Authorization": f"Bearer {api_key}", "User-Agent": f"memq-python/{__version__}"}


# -- the synchronous client ------------------------------------------------------------------


class Client:
    """memq over HTTP, synchronously. Use as a context manager, or call ``close()``.

    ``timeout_s`` bounds each HTTP request; ``transport`` replaces the network (tests pass an
    ``httpx.MockTransport``).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(api_key), timeout=timeout_s, transport=transport
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
        try:
            response = self._http.request(call.method, call.path, **call.options())
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise error_from(exc) from exc
        return _decode(response)

    # jobs

    def add(
        self,
        messages: Messages,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        infer: bool = True,
        memory_type: str | None = None,
        prompt: str | None = None,
        timestamp: datetime | int | None = None,
        expiration_date: datetime | None = None,
        webhook_url: str | None = None,
        idempotency_key: str | None = None,
        wait: bool = False,
        wait_timeout_s: float = 60.0,
    ) -> dict[str, Any]:
        """Queue a conversation (POST /v1/memories). Returns the JobAccepted answer
        (``job_id``, ``status``, ``status_url``, ``created``); with ``wait``, the finished
        JobPublic instead (whatever its status), or ``MemqTimeoutError`` after
        ``wait_timeout_s``. The same ``idempotency_key`` always answers with the same job."""
        body = {
            **_scope(user_id, agent_id, run_id),
            "messages": messages,
            "metadata": metadata,
            "infer": infer,
            "memory_type": memory_type,
            "prompt": prompt,
            "timestamp": timestamp,
            "expiration_date": expiration_date,
            "webhook_url": webhook_url,
        }
        deadline = time.monotonic() + wait_timeout_s
        wait_s = _server_wait_s(wait_timeout_s, self._timeout_s) if wait else None
        job = _as_dict(self._send(_add_call(body, idempotency_key, wait_s)))
        if not wait or _finished(job):
            return job
        return self.wait_for(job, timeout_s=max(deadline - time.monotonic(), 0.0))

    def job(self, job_id: str) -> dict[str, Any]:
        """The job (GET /v1/jobs/{id}): status, phase, counts, timings, results, errors."""
        return _as_dict(self._send(_Call("GET", f"/v1/jobs/{_segment(job_id)}")))

    def retry(self, job_id: str) -> dict[str, Any]:
        """Replay a failed or dead job from its recorded request; returns the job."""
        return _as_dict(self._send(_Call("POST", f"/v1/jobs/{_segment(job_id)}/retry")))

    def wait_for(
        self, job_or_id: JobRef, timeout_s: float = 60.0, poll_s: float = 0.2
    ) -> dict[str, Any]:
        """Poll the job until it is succeeded, failed or dead and return it (a failed job is
        returned, not raised: read ``status``). ``MemqTimeoutError`` after ``timeout_s``."""
        job_id = _job_id(job_or_id)
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            remaining = deadline - time.monotonic()
            if _finished(job):
                return job
            if remaining <= 0:
                raise _timed_out(job_id, timeout_s, job)
            time.sleep(min(poll_s, remaining))

    def add_batch(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Queue many conversations (POST /v1/batches), each item an ``add`` body; returns
        ``batch_id``, ``status_url`` and the accepted ``jobs``. A bad item queues nothing."""
        return _as_dict(self._send(_Call("POST", "/v1/batches", body={"items": items})))

    def batch(self, batch_id: str) -> dict[str, Any]:
        """Counts of the batch's jobs per status: ``batch_id``, ``total``, ``counts``."""
        return _as_dict(self._send(_Call("GET", f"/v1/batches/{_segment(batch_id)}")))

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
    ) -> list[dict[str, Any]]:
        """Hybrid search in a scope (at least one id); hits best first. ``reference_time`` is
        the moment relative times in the query ("last week") are read against (default: the
        server's now)."""
        options = {
            **_scope(user_id, agent_id, run_id),
            "filters": filters,
            "top_k": top_k,
            "threshold": threshold,
            "rerank": rerank,
            "explain": explain,
            "show_expired": show_expired,
            "reference_time": reference_time,
        }
        call = _Call("POST", "/v1/memories/search", body=_search_body(query, options))
        return _as_list(_as_dict(self._send(call))["results"])

    def search_many(self, queries: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]]:
        """Several searches (each a ``search`` body with ``query``), answered in order."""
        call = _Call("POST", "/v1/memories/search/batch", body={"queries": queries})
        return _as_list(_as_dict(self._send(call))["results"])

    def get(self, memory_id: str) -> dict[str, Any]:
        """One memory; ``NotFoundError`` when it does not exist (or was deleted)."""
        return _as_dict(self._send(_Call("GET", f"/v1/memories/{_segment(memory_id)}")))

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        page_size: int = 100,
    ) -> Iterator[dict[str, Any]]:
        """Every memory of the scope, oldest first, fetched page by page as the iterator is
        consumed (errors are raised during iteration)."""
        cursor: str | None = None
        while True:
            call = _list_call(_scope(user_id, agent_id, run_id), filters, page_size, cursor)
            page = _as_dict(self._send(call))
            yield from page["results"]
            cursor = page.get("next_cursor")
            if not cursor or not page["results"]:
                return

    def update(
        self, memory_id: str, *, text: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """New text (re-embedded) and/or metadata; returns the updated memory."""
        body = _without_none({"text": text, "metadata": metadata})
        return _as_dict(self._send(_Call("PUT", f"/v1/memories/{_segment(memory_id)}", body=body)))

    def delete(self, memory_id: str) -> dict[str, Any]:
        """Delete one memory (its history keeps a DELETE row)."""
        return _as_dict(self._send(_Call("DELETE", f"/v1/memories/{_segment(memory_id)}")))

    def delete_all(
        self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """Delete every memory of a scope (at least one id); ``deleted`` is the count."""
        call = _Call("DELETE", "/v1/memories", params=_scope(user_id, agent_id, run_id))
        return _as_dict(self._send(call))

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """ADD, UPDATE and DELETE events of a memory, oldest first."""
        return _as_list(self._send(_Call("GET", f"/v1/memories/{_segment(memory_id)}/history")))

    # admin and health

    def create_key(self, tenant: str, name: str = "", admin: bool = False) -> dict[str, Any]:
        """A new API key for ``tenant`` (needs an admin key): ``id``, ``tenant``, ``key``."""
        body = {"tenant": tenant, "name": name, "admin": admin}
        return _as_dict(self._send(_Call("POST", "/v1/admin/keys", body=body)))

    def revoke_key(self, key_id: str) -> dict[str, Any]:
        """Revoke a key by its id (needs an admin key)."""
        return _as_dict(self._send(_Call("DELETE", f"/v1/admin/keys/{_segment(key_id)}")))

    def healthz(self) -> dict[str, Any]:
        """The API process is up: ``{"status": "ok"}``."""
        return _as_dict(self._send(_Call("GET", "/healthz")))

    def readyz(self) -> dict[str, Any]:
        """Elasticsearch and Redis reachable; ``UnavailableError`` (the answer as its message)
        when one is not."""
        return _as_dict(self._send(_Call("GET", "/readyz")))


# -- the asynchronous client -----------------------------------------------------------------


class AsyncClient:
    """memq over HTTP with ``async`` methods; the same API and contracts as ``Client``.
    Use as an async context manager, or ``await aclose()`` (``close()`` is an alias)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._timeout_s = timeout_s
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout_s, transport=transport
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
        try:
            response = await self._http.request(call.method, call.path, **call.options())
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise error_from(exc) from exc
        return _decode(response)

    # jobs

    async def add(
        self,
        messages: Messages,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        infer: bool = True,
        memory_type: str | None = None,
        prompt: str | None = None,
        timestamp: datetime | int | None = None,
        expiration_date: datetime | None = None,
        webhook_url: str | None = None,
        idempotency_key: str | None = None,
        wait: bool = False,
        wait_timeout_s: float = 60.0,
    ) -> dict[str, Any]:
        """See ``Client.add``."""
        body = {
            **_scope(user_id, agent_id, run_id),
            "messages": messages,
            "metadata": metadata,
            "infer": infer,
            "memory_type": memory_type,
            "prompt": prompt,
            "timestamp": timestamp,
            "expiration_date": expiration_date,
            "webhook_url": webhook_url,
        }
        deadline = time.monotonic() + wait_timeout_s
        wait_s = _server_wait_s(wait_timeout_s, self._timeout_s) if wait else None
        job = _as_dict(await self._send(_add_call(body, idempotency_key, wait_s)))
        if not wait or _finished(job):
            return job
        return await self.wait_for(job, timeout_s=max(deadline - time.monotonic(), 0.0))

    async def job(self, job_id: str) -> dict[str, Any]:
        """See ``Client.job``."""
        return _as_dict(await self._send(_Call("GET", f"/v1/jobs/{_segment(job_id)}")))

    async def retry(self, job_id: str) -> dict[str, Any]:
        """See ``Client.retry``."""
        return _as_dict(await self._send(_Call("POST", f"/v1/jobs/{_segment(job_id)}/retry")))

    async def wait_for(
        self, job_or_id: JobRef, timeout_s: float = 60.0, poll_s: float = 0.2
    ) -> dict[str, Any]:
        """See ``Client.wait_for``."""
        job_id = _job_id(job_or_id)
        deadline = time.monotonic() + timeout_s
        while True:
            job = await self.job(job_id)
            remaining = deadline - time.monotonic()
            if _finished(job):
                return job
            if remaining <= 0:
                raise _timed_out(job_id, timeout_s, job)
            await asyncio.sleep(min(poll_s, remaining))

    async def add_batch(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """See ``Client.add_batch``."""
        return _as_dict(await self._send(_Call("POST", "/v1/batches", body={"items": items})))

    async def batch(self, batch_id: str) -> dict[str, Any]:
        """See ``Client.batch``."""
        return _as_dict(await self._send(_Call("GET", f"/v1/batches/{_segment(batch_id)}")))

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
    ) -> list[dict[str, Any]]:
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
        }
        call = _Call("POST", "/v1/memories/search", body=_search_body(query, options))
        return _as_list(_as_dict(await self._send(call))["results"])

    async def search_many(self, queries: Sequence[Mapping[str, Any]]) -> list[list[dict[str, Any]]]:
        """See ``Client.search_many``."""
        call = _Call("POST", "/v1/memories/search/batch", body={"queries": queries})
        return _as_list(_as_dict(await self._send(call))["results"])

    async def get(self, memory_id: str) -> dict[str, Any]:
        """See ``Client.get``."""
        return _as_dict(await self._send(_Call("GET", f"/v1/memories/{_segment(memory_id)}")))

    async def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: Mapping[str, Any] | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[dict[str, Any]]:
        """See ``Client.get_all``; iterate with ``async for``."""
        cursor: str | None = None
        while True:
            call = _list_call(_scope(user_id, agent_id, run_id), filters, page_size, cursor)
            page = _as_dict(await self._send(call))
            for item in page["results"]:
                yield item
            cursor = page.get("next_cursor")
            if not cursor or not page["results"]:
                return

    async def update(
        self, memory_id: str, *, text: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """See ``Client.update``."""
        body = _without_none({"text": text, "metadata": metadata})
        call = _Call("PUT", f"/v1/memories/{_segment(memory_id)}", body=body)
        return _as_dict(await self._send(call))

    async def delete(self, memory_id: str) -> dict[str, Any]:
        """See ``Client.delete``."""
        return _as_dict(await self._send(_Call("DELETE", f"/v1/memories/{_segment(memory_id)}")))

    async def delete_all(
        self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        """See ``Client.delete_all``."""
        call = _Call("DELETE", "/v1/memories", params=_scope(user_id, agent_id, run_id))
        return _as_dict(await self._send(call))

    async def history(self, memory_id: str) -> list[dict[str, Any]]:
        """See ``Client.history``."""
        call = _Call("GET", f"/v1/memories/{_segment(memory_id)}/history")
        return _as_list(await self._send(call))

    # admin and health

    async def create_key(self, tenant: str, name: str = "", admin: bool = False) -> dict[str, Any]:
        """See ``Client.create_key``."""
        body = {"tenant": tenant, "name": name, "admin": admin}
        return _as_dict(await self._send(_Call("POST", "/v1/admin/keys", body=body)))

    async def revoke_key(self, key_id: str) -> dict[str, Any]:
        """See ``Client.revoke_key``."""
        return _as_dict(await self._send(_Call("DELETE", f"/v1/admin/keys/{_segment(key_id)}")))

    async def healthz(self) -> dict[str, Any]:
        """See ``Client.healthz``."""
        return _as_dict(await self._send(_Call("GET", "/healthz")))

    async def readyz(self) -> dict[str, Any]:
        """See ``Client.readyz``."""
        return _as_dict(await self._send(_Call("GET", "/readyz")))
