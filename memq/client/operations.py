"""Every call of the API with the model its answer is read as (``Operation``): what ``Client``
and ``AsyncClient`` send, written once. A client method builds its operation here and hands
it to its own transport (``Client._run``, ``AsyncClient._run``), which is the only part of
the two clients that differs; ``add`` and ``wait_for``, which poll, are the exceptions."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from memq.client.answers import M, parse, parse_list, search_hits, search_many_hits
from memq.client.calls import (
    Call,
    JobQuery,
    Validity,
    get_call,
    jobs_call,
    list_call,
    scope_params,
    search_call,
    search_many_call,
    segment,
    without_none,
)
from memq.client.retries import Repeat
from memq.types import (
    Batch,
    BatchAccepted,
    Deleted,
    Health,
    HistoryEntry,
    Job,
    JobPage,
    KeyCreated,
    Memory,
    MemoryPage,
    Message,
    Readiness,
    SearchHits,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Operation(Generic[T]):
    """One call and how its decoded JSON answer becomes the method's result."""

    call: Call
    read: Callable[[Any], T]


def _model(model: type[M]) -> Callable[[Any], M]:
    """The reader of an answer that is one ``model``."""
    return lambda value: parse(model, value)


# jobs


def job(job_id: str) -> Operation[Job]:
    return Operation(Call("GET", f"/v1/jobs/{segment(job_id)}"), _model(Job))


def retry(job_id: str) -> Operation[Job]:
    return Operation(Call("POST", f"/v1/jobs/{segment(job_id)}/retry"), _model(Job))


def jobs_page(query: JobQuery, limit: int, cursor: str | None) -> Operation[JobPage]:
    return Operation(jobs_call(query, limit, cursor), _model(JobPage))


def add_batch(items: Sequence[Mapping[str, Any]]) -> Operation[BatchAccepted]:
    return Operation(Call("POST", "/v1/batches", body={"items": items}), _model(BatchAccepted))


def batch(batch_id: str) -> Operation[Batch]:
    return Operation(Call("GET", f"/v1/batches/{segment(batch_id)}"), _model(Batch))


# memories


def search(
    query: str,
    *,
    user_id: str | None,
    agent_id: str | None,
    run_id: str | None,
    filters: Mapping[str, Any] | None,
    top_k: int,
    threshold: float | None,
    rerank: bool,
    explain: bool,
    show_expired: bool,
    reference_time: datetime | None,
    as_of: datetime | None,
    include_replaced: bool,
) -> Operation[SearchHits]:
    options = {
        **scope_params(user_id, agent_id, run_id),
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
    return Operation(search_call(query, options), search_hits)


def search_many(queries: Sequence[Mapping[str, Any]]) -> Operation[list[SearchHits]]:
    return Operation(search_many_call(queries), search_many_hits)


def get(memory_id: str, include_sources: bool) -> Operation[Memory]:
    return Operation(get_call(memory_id, include_sources), _model(Memory))


def page(
    scope: dict[str, Any],
    filters: Mapping[str, Any] | None,
    page_size: int,
    cursor: str | None,
    validity: Validity,
) -> Operation[MemoryPage]:
    return Operation(list_call(scope, filters, page_size, cursor, validity), _model(MemoryPage))


def update(
    memory_id: str, text: str | None, metadata: Mapping[str, Any] | None
) -> Operation[Memory]:
    body = without_none({"text": text, "metadata": metadata})
    return Operation(Call("PUT", f"/v1/memories/{segment(memory_id)}", body=body), _model(Memory))


def delete(memory_id: str) -> Operation[Message]:
    return Operation(Call("DELETE", f"/v1/memories/{segment(memory_id)}"), _model(Message))


def delete_all(scope: dict[str, Any]) -> Operation[Deleted]:
    return Operation(Call("DELETE", "/v1/memories", params=scope), _model(Deleted))


def history(memory_id: str) -> Operation[list[HistoryEntry]]:
    call = Call("GET", f"/v1/memories/{segment(memory_id)}/history")
    return Operation(call, lambda value: parse_list(HistoryEntry, value))


# admin and health


def create_key(tenant: str, name: str, admin: bool) -> Operation[KeyCreated]:
    body = {"tenant": tenant, "name": name, "admin": admin}
    return Operation(Call("POST", "/v1/admin/keys", body=body), _model(KeyCreated))


def revoke_key(key_id: str) -> Operation[Message]:
    return Operation(Call("DELETE", f"/v1/admin/keys/{segment(key_id)}"), _model(Message))


def healthz() -> Operation[Health]:
    return Operation(Call("GET", "/healthz", repeat=Repeat.NEVER), _model(Health))


def readyz() -> Operation[Readiness]:
    return Operation(Call("GET", "/readyz", repeat=Repeat.NEVER), _model(Readiness))
