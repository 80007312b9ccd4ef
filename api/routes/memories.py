"""Intake (fire-and-forget add), memory CRUD, listing and search."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from api.body import UnicodeBody
from api.convert import (
    add_request,
    filters_param,
    job_public,
    memory_detail,
    memory_public,
    scope_of,
    shards_public,
    split_filters,
)
from api.deps import (
    AdminDep,
    ClockDep,
    ElasticStoreDep,
    IdPath,
    IntakeDep,
    PhaseDepsDep,
    PrincipalDep,
    SearcherDep,
    SettingsDep,
    StoreDep,
)
from api.limits import LimitsDep, ReadLimited, SearchLimited, WriteLimited
from api.request_ids import request_id_of
from api.schemas import (
    INCLUDE,
    BatchSearchRequest,
    BatchSearchResults,
    Deleted,
    HistoryEntry,
    Include,
    JobAccepted,
    JobPublic,
    MemoryCreate,
    MemoryDetail,
    MemoryPage,
    MemoryPublic,
    MemoryUpdate,
    Message,
    SearchRequest,
    SearchResults,
)
from pipeline.domain.jobs import JobRecord
from pipeline.domain.models import AwareDatetime
from pipeline.errors import InvalidInputError, TransientError
from pipeline.features.erase import UserErased
from pipeline.ingestion.intake import Intake
from pipeline.serving import crud
from pipeline.serving.keys import Principal
from pipeline.serving.listing import delete_all, list_memories
from pipeline.serving.search import SearchQuery
from pipeline.serving.search_models import AS_OF, INCLUDE_REPLACED
from pipeline.store.protocol import ServingStore
from pipeline.store.reads import HistoryRow

log = logging.getLogger("memq.api")
router = APIRouter(prefix="/v1", tags=["memories"], dependencies=[UnicodeBody, ReadLimited])
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]


def accept(
    intake: Intake, request: Request, body: MemoryCreate, principal: Principal, key: str | None
) -> tuple[JobAccepted, JobRecord]:
    started = time.perf_counter()
    add = add_request(body, principal)
    accepted = intake.submit(add, idempotency_key=key, request_id=request_id_of(request))
    request.app.state.metrics.enqueue_seconds.observe(time.perf_counter() - started)
    record = accepted.record
    log.info(
        "job %s (%s)",
        record.job_id,
        "accepted" if accepted.created else "already known",
        extra={"job_id": record.job_id, "tenant": principal.tenant},
    )
    url = str(request.url_for("get_job", job_id=record.job_id))
    return JobAccepted(
        job_id=record.job_id, status=record.status, status_url=url, created=accepted.created
    ), record


async def wait_for(store: ServingStore, record: JobRecord, timeout_s: float) -> JobRecord:
    """Poll the job until it ends or ``timeout_s`` passes, without holding a server thread. A
    job recorded ``succeeded`` is already findable (its writes refreshed the shards they wrote
    to), so nothing is refreshed here."""
    deadline = time.monotonic() + timeout_s
    while not record.ended and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        try:
            latest: JobRecord | None = await run_in_threadpool(store.get_job, record.job_id)
        except TransientError:  # the store is down: the job was accepted, keep waiting
            latest = None
        record = latest or record
    return record


@router.post(
    "/memories",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobAccepted | JobPublic,
    dependencies=[WriteLimited],
)
async def add_memories(
    *,
    body: MemoryCreate,
    request: Request,
    response: Response,
    intake: IntakeDep,
    store: StoreDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKey = None,
    wait: Annotated[bool, Query(description="wait (bounded) for the job to finish")] = False,
    wait_s: Annotated[float, Query(gt=0, le=300)] = 30.0,
) -> JobAccepted | JobPublic:
    """Queue a conversation; answers at once with the job. ``wait=true`` waits for the result
    (up to ``wait_s``, capped by the server) and returns the finished job, else 202."""
    accepted, record = await run_in_threadpool(
        accept, intake, request, body, principal, idempotency_key
    )
    if not wait:
        return accepted
    record = await wait_for(store, record, min(wait_s, settings.api.wait_max_s))
    if record.ended:
        response.status_code = status.HTTP_200_OK
        return job_public(record)
    return accepted


@router.get("/memories", response_model=MemoryPage)
def get_all(
    *,
    store: StoreDep,
    principal: PrincipalDep,
    limits: LimitsDep,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    filters: Annotated[str | None, Query(description="a JSON filter object")] = None,
    page_size: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=10_000)] = None,
    as_of: Annotated[AwareDatetime | None, Query(description=AS_OF)] = None,
    include_replaced: Annotated[bool, Query(description=INCLUDE_REPLACED)] = False,
) -> MemoryPage:
    """The scope's memories, oldest first; pass ``next_cursor`` back for the next page (with
    the same filters, ``as_of`` and ``include_replaced``)."""
    scope = scope_of(principal, user_id, agent_id, run_id)
    where = parse_filters(filters)
    page = limits.listing(
        principal.tenant,
        cursor,
        lambda at: list_memories(
            store,
            scope,
            where,
            page_size=page_size,
            cursor=at,
            as_of=as_of,
            include_replaced=include_replaced,
        ),
    )
    return MemoryPage(results=page.items, next_cursor=page.cursor)


def parse_filters(raw: str | None) -> dict[str, Any] | None:
    """The ``filters`` parameter: a JSON object (bounded: ``api.convert.filters_param``)."""
    if raw is None:
        return None
    value = filters_param(raw)
    if not isinstance(value, dict):
        raise InvalidInputError("filters must be a JSON object", field="filters")
    return value


@router.delete("/memories", response_model=Deleted, dependencies=[WriteLimited])
def delete_scope(
    *,
    store: StoreDep,
    clock: ClockDep,
    principal: PrincipalDep,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
) -> Deleted:
    """Delete every memory of a scope (at least one id required)."""
    scope = scope_of(principal, user_id, agent_id, run_id)
    deleted = delete_all(store, scope, None, clock())
    return Deleted(message=f"deleted {deleted} memories", deleted=deleted)


@router.delete("/users/{user_id}", response_model=UserErased, dependencies=[WriteLimited])
def erase_user(user_id: IdPath, intake: IntakeDep, principal: PrincipalDep) -> UserErased:
    """Forget a user completely: memories, history text, raw messages and session windows,
    entities and links, job records, job state and buffered chat messages (docs/ARCHITECTURE.md,
    "Erasure"). What stays: one content-free ERASE audit row. Safe to repeat; ``in_flight``
    lists jobs of the user that were unfinished (repeat the call once they have ended)."""
    return intake.erase_user(principal.tenant, user_id)


@router.post("/memories/search", response_model=SearchResults, dependencies=[SearchLimited])
def search(body: SearchRequest, searcher: SearcherDep, principal: PrincipalDep) -> SearchResults:
    """Hybrid search in a scope: vectors + BM25 + entities, with filters and explain. A
    result that some shards could not give is flagged ``partial``, never passed off as whole."""
    found = searcher.search_reported(search_query(body, principal))
    return SearchResults(
        results=found.hits, partial=found.partial, shards=shards_public(found.shards)
    )


@router.post("/memories/search/batch", response_model=BatchSearchResults)
def search_batch(
    body: BatchSearchRequest, searcher: SearcherDep, principal: PrincipalDep, limits: LimitsDep
) -> BatchSearchResults:
    """Several searches in one call, answered in the order given (each counts against the
    tenant's searches per second)."""
    limits.charge(principal.tenant, "search", cost=len(body.queries))
    queries = [search_query(q, principal) for q in body.queries]
    found = searcher.search_many_reported(queries)
    return BatchSearchResults(
        results=[f.hits for f in found],
        partial=any(f.partial for f in found),
        shards=[shards_public(f.shards) for f in found],
    )


def search_query(body: SearchRequest, principal: Principal) -> SearchQuery:
    """The scope comes from the top-level ids, or from ``filters`` as mem0 2.x writes it."""
    ids = {"user_id": body.user_id, "agent_id": body.agent_id, "run_id": body.run_id}
    scope, filters = split_filters(principal, body.filters, ids)
    options = body.model_dump(exclude={"user_id", "agent_id", "run_id", "filters"})
    return SearchQuery(scope=scope, filters=filters, **options)


@router.get("/memories/{memory_id}", response_model=MemoryDetail)
def get_memory(
    memory_id: IdPath,
    store: StoreDep,
    principal: PrincipalDep,
    include: Annotated[list[Include] | None, Query(max_length=5, description=INCLUDE)] = None,
) -> MemoryDetail:
    """One memory; with ``include=sources``, where it came from
    (``pipeline.features.provenance``)."""
    return memory_detail(store, crud.get_memory(store, principal.tenant, memory_id), include)


@router.put("/memories/{memory_id}", response_model=MemoryPublic, dependencies=[WriteLimited])
def update_memory(
    memory_id: IdPath,
    body: MemoryUpdate,
    store: StoreDep,
    deps: PhaseDepsDep,
    principal: PrincipalDep,
) -> MemoryPublic:
    """New text (re-embedded) and/or metadata; the id stays, the history records the change."""
    updated = crud.update_memory(
        store,
        deps,
        principal.tenant,
        memory_id,
        text=body.text,
        metadata=body.metadata,
    )
    return memory_public(updated)


@router.delete("/memories/{memory_id}", response_model=Message, dependencies=[WriteLimited])
def delete_memory(
    memory_id: IdPath, store: StoreDep, clock: ClockDep, principal: PrincipalDep
) -> Message:
    crud.delete_memory(store, principal.tenant, memory_id, clock())
    return Message(message="Memory deleted successfully!")


@router.get("/memories/{memory_id}/history", response_model=list[HistoryEntry])
def history(memory_id: IdPath, store: StoreDep, principal: PrincipalDep) -> list[HistoryRow]:
    """ADD, UPDATE and DELETE events of a memory, oldest first."""
    return crud.memory_history(store, principal.tenant, memory_id)


@router.post("/reset", response_model=Message)
def reset(store: ElasticStoreDep, settings: SettingsDep, _admin: AdminDep) -> Message:
    """Delete every memory, entity, history row, message and job of every tenant (keys stay)."""
    store.reset(settings.es, settings.embedder.dims)
    return Message(message="memq reset")
