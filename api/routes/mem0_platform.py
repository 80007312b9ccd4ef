"""The rest of the ``mem0ai`` hosted client's wire contract (``api.routes.mem0`` has the memory
calls): entities (``users``, ``delete_users``, ``reset``), exports, feedback, and a clear 501
for the parts of mem0's platform that have no meaning in memq (``pipeline.features.platform``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from api.body import UnicodeBody
from api.deps import (
    ClockDep,
    ElasticStoreDep,
    IdPath,
    IntakeDep,
    PrincipalDep,
    SettingsDep,
    StoreDep,
)
from api.limits import ReadLimited, WriteLimited
from api.schemas import (
    Mem0Entities,
    Mem0Entity,
    Mem0EntityDeleted,
    Mem0Export,
    Mem0ExportCreated,
    Mem0FeedbackIn,
    Mem0FeedbackOut,
)
from pipeline.adapters.embedding.versioned import spec_in_use
from pipeline.errors import InvalidInputError, NotServedError
from pipeline.features.export import Selector
from pipeline.features.export_read import ExportDocument, export_id, read_export, selector_of
from pipeline.features.platform import Feedback, delete_entity, list_entities, record_feedback
from pipeline.store.filters import SCOPE_KEYS, split_scope

router = APIRouter(tags=["mem0 compatibility"], dependencies=[UnicodeBody, ReadLimited])


@router.get("/v1/entities/", response_model=Mem0Entities)
def users(store: StoreDep, principal: PrincipalDep) -> Mem0Entities:
    """mem0's ``users()``: every user, agent and run with memories in the tenant, in one page
    (``reset()`` deletes each one it lists)."""
    tenant = principal.tenant
    results = [
        Mem0Entity(
            id=e.name,
            name=e.name,
            type=e.kind,
            total_memories=e.memories,
            created_at=e.created_at,
            updated_at=e.updated_at,
            owner=tenant,
            organization=tenant,
        )
        for e in list_entities(store, tenant)
    ]
    return Mem0Entities(count=len(results), results=results)


@router.delete(
    "/v2/entities/{entity_type}/{entity_id}/",
    response_model=Mem0EntityDeleted,
    response_model_exclude_none=True,
    dependencies=[WriteLimited],
)
def delete_users(
    *,
    entity_type: str,
    entity_id: IdPath,
    intake: IntakeDep,
    store: StoreDep,
    clock: ClockDep,
    principal: PrincipalDep,
) -> Mem0EntityDeleted:
    """mem0's ``delete_users(...)``: a user is erased completely (as ``DELETE
    /v1/users/{user_id}``); an agent or a run loses its memories. mem0's apps do not exist in
    memq (422)."""
    if entity_type == "user":
        gone = intake.erase_user(principal.tenant, entity_id)
        return Mem0EntityDeleted(message=DELETED, erased=gone.erased, in_flight=gone.in_flight)
    deleted = delete_entity(store, principal.tenant, entity_type, entity_id, clock())
    return Mem0EntityDeleted(message=DELETED, deleted=deleted)


DELETED = "Entity deleted successfully!"


@router.post("/v1/exports/", response_model=Mem0ExportCreated)
def create_memory_export(
    principal: PrincipalDep, body: Annotated[dict[str, Any], Body()]
) -> Mem0ExportCreated:
    """mem0's ``create_memory_export(schema, **filters)``: names the selection. The schema is
    not applied (it needs a model call): the export is memq's own dump, read when fetched."""
    selector = export_selector(principal.tenant, body)
    return Mem0ExportCreated(
        message="Export ready: memq reads it when it is fetched (the schema is not applied)",
        id=export_id(selector),
    )


@router.post("/v1/exports/get/", response_model=Mem0Export)
def get_memory_export(
    store: ElasticStoreDep,
    settings: SettingsDep,
    clock: ClockDep,
    principal: PrincipalDep,
    body: Annotated[dict[str, Any], Body()],
) -> ExportDocument:
    """mem0's ``get_memory_export(memory_export_id=...)``, or with the same ids/filters as
    the create: the selected memories with their history and entities, as of now."""
    given = body.get("memory_export_id") or body.get("id")
    if given is not None and not isinstance(given, str):
        raise InvalidInputError("memory_export_id must be a string", field="memory_export_id")
    tenant = principal.tenant
    selector = selector_of(tenant, given) if given else export_selector(tenant, body)
    embedder = spec_in_use(settings.embedder, store.embedder_meta())
    return read_export(store, selector, embedder.model, embedder.dims, clock())


def export_selector(tenant: str, body: dict[str, Any]) -> Selector:
    """The ids of an export body: top-level ``user_id``/``agent_id``/``run_id`` and those in
    ``filters`` (they must agree). An export selects by those ids only (422 otherwise)."""
    split = split_scope(body.get("filters"))
    if split.rest:
        raise InvalidInputError(
            "an export selects by user_id, agent_id and run_id only", field="filters"
        )
    ids = dict(split.ids)
    for key in SCOPE_KEYS:
        value = body.get(key)
        if value is not None and ids.setdefault(key, value) != value:
            raise InvalidInputError(f"{key} differs between the body and its filters", field=key)
    return Selector.model_validate({"tenant": tenant, **ids})


@router.post(
    "/v1/feedback/",
    response_model=Mem0FeedbackOut,
    response_model_exclude_none=True,
    dependencies=[WriteLimited],
)
def feedback(
    store: StoreDep, clock: ClockDep, principal: PrincipalDep, body: Mem0FeedbackIn
) -> Mem0FeedbackOut:
    """mem0's ``feedback(memory_id, feedback, feedback_reason)``: kept on the memory and shown
    when it is read (``feedback``, ``feedback_reason``); ``feedback=None`` clears it. Recorded
    only: search does not use it."""
    verdict = Feedback(body.feedback) if body.feedback else None
    memory = record_feedback(
        store,
        tenant=principal.tenant,
        memory_id=body.memory_id,
        feedback=verdict,
        reason=body.feedback_reason,
        now=clock(),
    )
    return Mem0FeedbackOut(
        id=memory.id,
        feedback=memory.feedback,
        feedback_reason=memory.feedback_reason,
        message="Feedback recorded" if verdict else "Feedback cleared",
    )


NOT_SERVED = {
    "summary": (
        "memq serves no summaries: an honest summary needs a model call over the memories on "
        "every read, and memq makes none on reads. List them with get_all or search instead"
    ),
    "profiles": (
        "memq keeps no user profiles (mem0 builds them with a model): the memories are the "
        "profile; list them with get_all"
    ),
    "platform": (
        "memq has no mem0 organisations, projects or project webhooks: a memq tenant is the "
        "project; tenants' keys are managed at /v1/admin/keys, job webhooks per request"
    ),
}


def not_served(what: str) -> None:
    raise NotServedError(NOT_SERVED[what])


@router.post("/v1/summary/", status_code=501, include_in_schema=False)
def mem0_summary() -> None:
    not_served("summary")


@router.api_route(
    "/v2/profiles/{rest:path}", methods=["GET", "POST"], status_code=501, include_in_schema=False
)
@router.get("/v2/entities/user/{entity_id}/profile/", status_code=501, include_in_schema=False)
def mem0_profiles() -> None:
    not_served("profiles")


@router.api_route(
    "/api/v1/{rest:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
    status_code=501,
    include_in_schema=False,
)
def mem0_platform() -> None:
    not_served("platform")
