"""The wire contract of the ``mem0ai`` hosted client (``MemoryClient(api_key, host=...)``), so an
application written against it works unchanged against memq: the same paths (trailing slashes
included), bodies and reply shapes, over the same pipeline functions as memq's own routes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from api.body import UnicodeBody
from api.convert import (
    filters_param,
    memory_detail,
    memory_public,
    scope_from_filters,
    shards_public,
    split_filters,
)
from api.deps import (
    ClockDep,
    IdPath,
    IntakeDep,
    PhaseDepsDep,
    PrincipalDep,
    SearcherDep,
    SettingsDep,
    StoreDep,
)
from api.limits import LimitsDep, ReadLimited, SearchLimited, WriteLimited
from api.routes.memories import accept, wait_for
from api.schemas import (
    INCLUDE,
    Deleted,
    Include,
    Mem0Added,
    Mem0HistoryEntry,
    Mem0Hit,
    Mem0Page,
    Mem0Ping,
    Mem0Results,
    Mem0Updated,
    MemoryCreate,
    MemoryDetail,
    MemoryPublic,
    Message,
)
from pipeline.domain.jobs import JobStatus, mem0_results
from pipeline.domain.models import Scope
from pipeline.domain.validity import mem0_event
from pipeline.errors import InvalidInputError
from pipeline.serving import crud
from pipeline.serving.listing import close_cursor, count_listed, delete_all, list_memories
from pipeline.serving.search import SearchQuery
from pipeline.store.filters import SCOPE_KEYS
from pipeline.store.protocol import ServingStore

router = APIRouter(
    tags=["mem0 compatibility"], include_in_schema=True, dependencies=[UnicodeBody, ReadLimited]
)


class Mem0Search(BaseModel):
    """The fields of a mem0 search body that memq uses (the others are accepted and ignored)."""

    model_config = ConfigDict(extra="ignore")

    query: str = Field(min_length=1, max_length=4000)
    filters: dict[str, Any] | None = None
    top_k: int = Field(default=10, ge=1, le=1000)
    threshold: float | None = Field(default=None, ge=0, le=1)


MEM0_IGNORED = (
    "version",
    "output_format",
    "async_mode",
    "filters",
    "enable_graph",
    "includes",
    "excludes",
    "immutable",
    "org_id",
    "project_id",
    "custom_categories",
    "categories",
)


@router.get("/v1/ping/", response_model=Mem0Ping)
def ping(principal: PrincipalDep) -> Mem0Ping:
    """What the mem0 client reads at construction: an org and a project (here: the tenant)."""
    tenant = principal.tenant
    return Mem0Ping(status="ok", org_id=tenant, project_id=tenant, user_email="")


@router.post(
    "/v3/memories/add/",
    response_model=Mem0Added,
    response_model_exclude_none=True,
    dependencies=[WriteLimited],
)
async def add(
    *,
    request: Request,
    intake: IntakeDep,
    store: StoreDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any], Body()],
) -> Mem0Added:
    """mem0's add: blocking by default (results in the reply); ``async_mode=true`` only queues."""
    ids = {
        **scope_from_filters(body.get("filters")),
        **{k: body[k] for k in SCOPE_KEYS if body.get(k)},
    }
    fields = {
        k: v for k, v in body.items() if k not in (*MEM0_IGNORED, *SCOPE_KEYS) and v is not None
    }
    create = MemoryCreate.model_validate({**fields, **ids})
    accepted, record = await run_in_threadpool(accept, intake, request, create, principal, None)
    if body.get("async_mode"):
        return Mem0Added.pending(accepted.job_id)
    record = await wait_for(store, record, settings.api.wait_max_s)
    if not record.ended:
        return Mem0Added.pending(record.job_id)
    if record.status != JobStatus.SUCCEEDED:
        raise InvalidInputError(f"job {record.job_id} {record.status}: {record.reason}")
    return Mem0Added.model_validate({"results": mem0_results(record.results)})


@router.post("/v3/memories/", responses={200: {"model": Mem0Page}})
def get_all(
    *,
    store: StoreDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    limits: LimitsDep,
    body: Annotated[dict[str, Any], Body()],
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    page_size: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """mem0's get_all: scope ids inside ``filters``; page-number pagination over memq's cursor.
    Reaching page N reads the N-1 pages before it, so a page past ``MEMQ_API_PAGE_WALK_MAX``
    memories is refused (422): memq's own ``GET /v1/memories`` pages any depth by cursor."""
    scope, rest = split_filters(principal, body.get("filters"))
    walk_max = settings.api.page_walk_max
    if (page - 1) * page_size > walk_max:
        raise InvalidInputError(
            f"page {page} lies past the first {walk_max} memories: page by cursor with "
            "GET /v1/memories instead",
            field="page",
        )
    limits.charge(principal.tenant, "read", cost=page)  # it reads every page up to its own
    limits.may_open_cursor(principal.tenant)
    items, cursor = walk_to(store, scope, rest, page, page_size)
    total = count_listed(store, scope, rest)
    found = Mem0Page(
        count=total,
        next=page + 1 if cursor else None,
        previous=page - 1 if page > 1 else None,
        results=items,
    )
    return JSONResponse(found.wire())


def walk_to(
    store: ServingStore, scope: Scope, rest: dict[str, Any] | None, page: int, page_size: int
) -> tuple[list[MemoryPublic], str | None]:
    """The items of page ``page``, and whether more follow (its point in time is given back
    either way: mem0's clients page by number, not by cursor)."""
    cursor, items = None, []
    for _ in range(page):
        result = list_memories(store, scope, rest, page_size=page_size, cursor=cursor)
        items, cursor = result.items, result.cursor
        if cursor is None:
            return items, None
    if cursor is not None:
        close_cursor(store, cursor)
    return items, cursor


@router.post(
    "/v3/memories/search/",
    response_model=Mem0Results,
    response_model_exclude_none=True,
    dependencies=[SearchLimited],
)
def search(
    searcher: SearcherDep, principal: PrincipalDep, body: Annotated[dict[str, Any], Body()]
) -> Mem0Results:
    asked = Mem0Search.model_validate(body)
    scope, rest = split_filters(principal, asked.filters)
    query = SearchQuery(
        query=asked.query, scope=scope, filters=rest, top_k=asked.top_k, threshold=asked.threshold
    )
    found = searcher.search_reported(query)
    hits = [Mem0Hit.model_validate(h, from_attributes=True) for h in found.hits]
    if not found.partial:  # mem0's own answers have no such keys
        return Mem0Results(results=hits)
    return Mem0Results(results=hits, partial=True, shards=shards_public(found.shards))


@router.get(
    "/v1/memories/{memory_id}/", response_model=MemoryDetail, response_model_exclude_none=True
)
def get(
    memory_id: IdPath,
    store: StoreDep,
    principal: PrincipalDep,
    include: Annotated[list[Include] | None, Query(max_length=5, description=INCLUDE)] = None,
) -> MemoryDetail:
    """mem0's read of one memory; ``include=sources`` (memq's) adds its provenance."""
    item = crud.get_memory(store, principal.tenant, memory_id)
    return memory_detail(store, item, include)


@router.put(
    "/v1/memories/{memory_id}/",
    response_model=Mem0Updated,
    response_model_exclude_none=True,
    dependencies=[WriteLimited],
)
def update(
    memory_id: IdPath,
    store: StoreDep,
    deps: PhaseDepsDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any], Body()],
) -> Mem0Updated:
    updated = crud.update_memory(
        store,
        deps,
        principal.tenant,
        memory_id,
        text=body.get("text"),
        metadata=body.get("metadata"),
    )
    public = memory_public(updated).model_dump()
    return Mem0Updated(**public, message="Memory updated successfully!")


@router.delete("/v1/memories/{memory_id}/", response_model=Message, dependencies=[WriteLimited])
def delete(memory_id: IdPath, store: StoreDep, clock: ClockDep, principal: PrincipalDep) -> Message:
    crud.delete_memory(store, principal.tenant, memory_id, clock())
    return Message(message="Memory deleted successfully!")


@router.delete("/v1/memories/", response_model=Deleted, dependencies=[WriteLimited])
def delete_everything(
    *,
    store: StoreDep,
    clock: ClockDep,
    principal: PrincipalDep,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    filters: str | None = None,
) -> Deleted:
    """mem0's delete_all: ids as query parameters, or in ``filters``: JSON, or the
    Python-repr dict its client sends (``api.convert.filters_param``: bounded in length and
    depth, literals only). Every condition of the filter holds."""
    given = {"user_id": user_id or None, "agent_id": agent_id or None, "run_id": run_id or None}
    parsed = filters_param(filters, literals=True) if filters else None
    scope, rest = split_filters(principal, parsed, given)
    deleted = delete_all(store, scope, rest, clock())
    return Deleted(message="Memories deleted successfully!", deleted=deleted)


@router.get("/v1/memories/{memory_id}/history/", response_model=list[Mem0HistoryEntry])
def history(memory_id: IdPath, store: StoreDep, principal: PrincipalDep) -> list[Mem0HistoryEntry]:
    rows = crud.memory_history(store, principal.tenant, memory_id)
    return [
        Mem0HistoryEntry(
            id=r.id,
            memory_id=r.memory_id,
            event=mem0_event(r.event),
            old_memory=r.old,
            new_memory=r.new,
            created_at=r.created_at,
        )
        for r in rows
    ]


@router.put("/v1/batch/", response_model=Message)
def batch_update(
    store: StoreDep,
    deps: PhaseDepsDep,
    principal: PrincipalDep,
    limits: LimitsDep,
    body: Annotated[dict[str, Any], Body()],
) -> Message:
    items = batch_items(body)
    limits.charge(principal.tenant, "write", cost=len(items))  # a batch costs its items
    for item in items:  # all checked first: a bad item changes nothing
        crud.check_update(item.text, item.metadata)
        crud.get_memory(store, principal.tenant, item.memory_id)
    for item in items:
        crud.update_memory(
            store, deps, principal.tenant, item.memory_id, text=item.text, metadata=item.metadata
        )
    return Message(message=f"Successfully updated {len(items)} memories")


@router.delete("/v1/batch/", response_model=Message)
def batch_delete(
    store: StoreDep,
    clock: ClockDep,
    principal: PrincipalDep,
    limits: LimitsDep,
    body: Annotated[dict[str, Any], Body()],
) -> Message:
    items = batch_items(body)
    limits.charge(principal.tenant, "write", cost=len(items))  # a batch costs its items
    for item in items:
        crud.get_memory(store, principal.tenant, item.memory_id)
    for item in items:
        crud.delete_memory(store, principal.tenant, item.memory_id, clock())
    return Message(message=f"Successfully deleted {len(items)} memories")


@dataclass(frozen=True)
class BatchItem:
    """One item of a mem0 batch: the memory and, for an update, its new text and/or metadata
    as given (``crud.check_update`` checks them)."""

    memory_id: str
    text: Any = None
    metadata: Any = None


def batch_items(body: dict[str, Any]) -> list[BatchItem]:
    items = body.get("memories")
    if not isinstance(items, list) or not 1 <= len(items) <= 1000:
        raise InvalidInputError("memories must be a list of 1..1000 items", field="memories")
    if not all(isinstance(i, dict) and isinstance(i.get("memory_id"), str) for i in items):
        raise InvalidInputError("each item needs a memory_id", field="memories")
    return [BatchItem(i["memory_id"], i.get("text"), i.get("metadata")) for i in items]
