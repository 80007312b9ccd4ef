"""The requests of the API, built the same way for both clients: ``Call`` (method, path,
parameters, body, headers, and when it may be sent again) and the functions that make the
ones with options (an add, a search, a listing)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TypedDict
from urllib.parse import quote

from memq.client.retries import Repeat
from memq.types import Job, JobAccepted

_SERVER_WAIT_MAX_S = 300.0  # the API refuses a longer ``wait_s``

Messages = str | Mapping[str, Any] | Sequence[Mapping[str, Any]]
JobRef = str | Mapping[str, Any] | JobAccepted | Job


@dataclass(frozen=True)
class Call:
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
            content = encode(self.body)
            headers["Content-Type"] = "application/json"
        return {"params": params, "headers": headers, "content": content}


def encode(value: Any) -> str:
    """JSON with datetimes and dates as ISO-8601 (also inside metadata and filters)."""
    return json.dumps(value, default=_json_default, separators=(",", ":"))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{value.__class__.__name__} is not JSON serialisable")


def segment(value: str) -> str:
    """A path segment, escaped so an id can never change the route."""
    return quote(value, safe="")


def scope_params(user_id: str | None, agent_id: str | None, run_id: str | None) -> dict[str, Any]:
    return {"user_id": user_id, "agent_id": agent_id, "run_id": run_id}


def without_none(values: Mapping[str, Any]) -> dict[str, Any]:
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
class AddCall:
    """An add, ready to send: the call, and how long the caller will wait for the job."""

    call: Call
    wait_timeout_s: float


def add_call(messages: Messages, options: AddOptions, wait: bool, http_timeout_s: float) -> AddCall:
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
    body = without_none({**fields, "messages": messages})
    call = Call("POST", "/v1/memories", params, body, headers, repeat=Repeat.IDEMPOTENT)
    return AddCall(call, wait_timeout_s)


def search_call(query: str, options: Mapping[str, Any]) -> Call:
    body = without_none({"query": query, **options})
    return Call("POST", "/v1/memories/search", body=body, repeat=Repeat.IDEMPOTENT)


def search_many_call(queries: Sequence[Mapping[str, Any]]) -> Call:
    body = {"queries": queries}
    return Call("POST", "/v1/memories/search/batch", body=body, repeat=Repeat.IDEMPOTENT)


class Validity(TypedDict, total=False):
    """Which memories a listing shows by their validity: ``as_of`` what was true then (default:
    what is true now); ``include_replaced`` also those a newer memory replaced."""

    as_of: datetime | None
    include_replaced: bool


def get_call(memory_id: str, include_sources: bool) -> Call:
    params = {"include": "sources"} if include_sources else {}
    return Call("GET", f"/v1/memories/{segment(memory_id)}", params=params)


def list_call(
    scope: dict[str, Any],
    filters: Any,
    page_size: int,
    cursor: str | None,
    validity: Validity,
) -> Call:
    params = {**scope, "page_size": page_size, "cursor": cursor}
    if filters is not None:
        params["filters"] = encode(filters)
    if (as_of := validity.get("as_of")) is not None:
        params["as_of"] = as_of.isoformat()
    if validity.get("include_replaced"):
        params["include_replaced"] = "true"
    return Call("GET", "/v1/memories", params=params)


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


def jobs_call(query: JobQuery, limit: int, cursor: str | None) -> Call:
    params: dict[str, Any] = {k: v for k, v in query.items() if v is not None}
    status = params.get("status")
    if status is not None and not isinstance(status, str):
        params["status"] = ",".join(status)
    for bound in ("since", "until"):
        if isinstance(params.get(bound), datetime):
            params[bound] = params[bound].isoformat()
    return Call("GET", "/v1/jobs", params={**params, "limit": limit, "cursor": cursor})


def job_id_of(job_or_id: JobRef) -> str:
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
