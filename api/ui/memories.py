"""Scopes, a scope's memories, one memory (history, conversation, entities; edit, delete) and
the search playground. Each page calls what the REST route of the same thing calls, with the
session's principal, so the tenant checks are the API's own."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request, Response

from api.convert import scope_of
from api.deps import ClockDep, PhaseDepsDep, SearcherDep, StoreDep
from api.limits import LimitsDep
from api.routes.memories import parse_filters, search_query
from api.schemas import SearchRequest
from api.ui.core import PageRoute, PostedSessionDep, SessionDep, render, see_other
from pipeline.errors import InvalidInputError
from pipeline.features import explorer
from pipeline.features.explorer import ScopeKind
from pipeline.serving import crud

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False)
Id = Annotated[str | None, Query(max_length=200)]
Text = Annotated[str, Query(max_length=4000)]


def blank_none(value: str | None) -> str | None:
    return value.strip() or None if value else None


@router.get("/scopes", name="ui_scopes_page")
def scopes_page(
    request: Request,
    store: StoreDep,
    session: SessionDep,
    kind: ScopeKind = ScopeKind.USER,
    limit: Annotated[int, Query(ge=1, le=explorer.MAX_SCOPES)] = 100,
) -> Response:
    listed = explorer.list_scopes(store, session.tenant, kind, limit)
    context = {"kind": kind, "kinds": list(ScopeKind), "listed": listed, "limit": limit}
    return render(request, "scopes.html", context)


@router.get("/memories", name="ui_memories_page")
def memories_page(
    *,
    request: Request,
    store: StoreDep,
    session: SessionDep,
    user_id: Id = None,
    agent_id: Id = None,
    run_id: Id = None,
    filters: Text = "",
    contains: Annotated[str, Query(max_length=500)] = "",
    sort: Annotated[str, Query(pattern="^(newest|oldest)$")] = "newest",
    size: Annotated[int, Query(ge=1, le=explorer.MAX_BROWSE_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
) -> Response:
    """A scope's memories: a text to contain, a filter in memq's language, newest or oldest
    first, ``size`` a page."""
    ids = {"user_id": blank_none(user_id), "agent_id": blank_none(agent_id)}
    ids["run_id"] = blank_none(run_id)
    scope = scope_of(session.principal, **ids)
    where = combined_filters(parse_filters(filters.strip() or None), contains.strip())
    page = explorer.browse_memories(
        store, scope, where, newest_first=sort == "newest", size=size, cursor=cursor
    )
    query = {k: v for k, v in ids.items() if v} | {"sort": sort, "size": size}
    query |= {"filters": filters, "contains": contains}
    context = {"scope": scope, "page": page, "form": query}
    context["next_url"] = (
        f"{request.url_for('ui_memories_page')}?{urlencode(query | {'cursor': page.next_cursor})}"
        if page.next_cursor
        else None
    )
    return render(request, "memories.html", context)


def json_object(raw: str, field: str) -> dict[str, Any] | None:
    """A JSON object typed in a form (blank: None); ``InvalidInputError`` naming ``field``."""
    if not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise InvalidInputError(f"{field} is not valid JSON", field=field) from exc
    if not isinstance(value, dict):
        raise InvalidInputError(f"{field} must be a JSON object", field=field)
    return value


def combined_filters(filters: dict[str, Any] | None, contains: str) -> dict[str, Any] | None:
    """The JSON filter and a "text contains" box, ANDed."""
    if not contains:
        return filters
    text = {"text": {"icontains": contains}}
    return {"AND": [filters, text]} if filters else text


@router.get("/memories/{memory_id}", name="ui_memory_page")
def memory_page(request: Request, memory_id: str, store: StoreDep, session: SessionDep) -> Response:
    detail = explorer.memory_detail(store, session.tenant, memory_id)
    return render(request, "memory.html", {"detail": detail, "m": detail.memory})


@router.post("/memories/{memory_id}/edit")
def edit_memory(
    *,
    request: Request,
    memory_id: str,
    store: StoreDep,
    deps: PhaseDepsDep,
    limits: LimitsDep,
    session: PostedSessionDep,
    text: Annotated[str, Form(max_length=crud.MAX_TEXT_CHARS + 1000)] = "",
    metadata: Annotated[str, Form(max_length=100_000)] = "",
) -> Response:
    """Save new text and/or metadata (as ``PUT /v1/memories/{id}``); blank fields stay."""
    limits.charge(session.tenant, "write")
    crud.update_memory(
        store,
        deps,
        session.tenant,
        memory_id,
        text=text.strip() or None,
        metadata=json_object(metadata, "metadata"),
    )
    return see_other(str(request.url_for("ui_memory_page", memory_id=memory_id)))


@router.get("/memories/{memory_id}/delete", name="ui_delete_memory_page")
def confirm_delete(
    request: Request, memory_id: str, store: StoreDep, session: SessionDep
) -> Response:
    memory = crud.get_memory(store, session.tenant, memory_id)
    context = {
        "title": "Delete this memory?",
        "items": [f"the memory “{memory.text}”"],
        "keeps": "Its history keeps a DELETE row.",
        "action": str(request.url_for("ui_delete_memory", memory_id=memory_id)),
        "button": "Delete the memory",
        "back": str(request.url_for("ui_memory_page", memory_id=memory_id)),
    }
    return render(request, "confirm.html", context)


@router.post("/memories/{memory_id}/delete", name="ui_delete_memory")
def delete_memory(
    *,
    request: Request,
    memory_id: str,
    store: StoreDep,
    clock: ClockDep,
    limits: LimitsDep,
    session: PostedSessionDep,
) -> Response:
    limits.charge(session.tenant, "write")
    memory = crud.get_memory(store, session.tenant, memory_id)
    crud.delete_memory(store, session.tenant, memory_id, clock())
    ids = memory.scope.fields()
    ids.pop("tenant")
    return see_other(f"{request.url_for('ui_memories_page')}?{urlencode(ids)}")


@router.get("/search", name="ui_search_page")
def search_page(
    *,
    request: Request,
    searcher: SearcherDep,
    limits: LimitsDep,
    session: SessionDep,
    query: Text = "",
    user_id: Id = None,
    agent_id: Id = None,
    run_id: Id = None,
    filters: Text = "",
    reference_time: Annotated[str, Query(max_length=64)] = "",
    top_k: Annotated[int, Query(ge=1, le=100)] = 10,
) -> Response:
    """Run a search with ``explain`` and show every hit's score components."""
    form: dict[str, Any] = {"query": query, "user_id": user_id or "", "top_k": top_k}
    form |= {"agent_id": agent_id or "", "run_id": run_id or "", "filters": filters}
    form |= {"reference_time": reference_time}
    context: dict[str, Any] = {"form": form, "found": None}
    if query.strip():
        limits.charge(session.tenant, "search")
        body = search_request(form)
        context["found"] = searcher.search_reported(search_query(body, session.principal))
    return render(request, "search.html", context)


def search_request(form: dict[str, Any]) -> SearchRequest:
    """The playground's form as the API's search body, explained."""
    return SearchRequest(
        query=form["query"],
        filters=parse_filters(form["filters"].strip() or None),
        top_k=form["top_k"],
        reference_time=explorer.parse_time(form["reference_time"], "reference_time"),
        explain=True,
        user_id=blank_none(form["user_id"]),
        agent_id=blank_none(form["agent_id"]),
        run_id=blank_none(form["run_id"]),
    )
