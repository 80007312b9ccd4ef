"""Erasing a user (any signed-in tenant, for its own users) and the admin pages: tenant keys
(create, revoke), memories per tenant, and the index versions (a re-embed started, its
progress)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from api.deps import (
    ClockDep,
    ElasticStoreDep,
    IdPath,
    IntakeDep,
    KeysDep,
    SettingsDep,
    StoreDep,
)
from api.limits import LimitsDep
from api.reprocess import plan_public, run_of, start_public, status_public
from api.schemas import KeyCreate, ReprocessCreate
from api.ui.core import (
    AdminPostedSessionDep,
    AdminSessionDep,
    PageRoute,
    PostedSessionDep,
    SessionDep,
    render,
    see_other,
)
from pipeline.config import Settings
from pipeline.errors import InvalidInputError
from pipeline.features import explorer
from pipeline.ingestion.intake import Intake
from pipeline.store.elastic import ElasticStore

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False)


@router.get("/users/{user_id}/erase", name="ui_erase_page")
def confirm_erase(
    request: Request, user_id: IdPath, store: StoreDep, session: SessionDep
) -> Response:
    """What erasing the user removes, named and counted, before anything is removed."""
    preview = explorer.erase_preview(store, session.tenant, user_id)
    jobs = sum(preview.jobs.values())
    by_status = ", ".join(f"{n} {s}" for s, n in sorted(preview.jobs.items()))
    context = {
        "title": f"Erase the user {user_id}?",
        "items": [
            f"{preview.memories} memories of {user_id}, and the text in their history",
            f"{jobs} job records" + (f" ({by_status})" if by_status else ""),
            "every message and session window of the user's conversations",
            "the user's entities and their links, job state and buffered chat messages",
        ],
        "keeps": "What stays: one ERASE audit row without content. This cannot be undone.",
        "action": str(request.url_for("ui_erase_user", user_id=user_id)),
        "button": f"Erase {user_id}",
        "back": str(request.url_for("ui_scopes_page")),
        "confirm_text": user_id,
    }
    return render(request, "confirm.html", context)


@router.post("/users/{user_id}/erase", name="ui_erase_user")
def erase_user(
    *,
    request: Request,
    user_id: IdPath,
    intake: IntakeDep,
    limits: LimitsDep,
    session: PostedSessionDep,
    confirm: Annotated[str, Form(max_length=200)] = "",
) -> Response:
    """As ``DELETE /v1/users/{user_id}``, once the user's id was typed to confirm."""
    if confirm != user_id:
        raise InvalidInputError(f"type {user_id} to confirm the erasure", field="confirm")
    limits.charge(session.tenant, "write")
    result = intake.erase_user(session.tenant, user_id)
    return render(request, "erased.html", {"user_id": user_id, "result": result})


@router.get("/admin", name="ui_admin_page")
def admin_page(
    *,
    request: Request,
    keys: KeysDep,
    store: StoreDep,
    elastic: ElasticStoreDep,
    settings: SettingsDep,
    intake: IntakeDep,
    _session: AdminSessionDep,
) -> Response:
    context = {
        "keys": keys.list(),
        "tenants": explorer.tenant_summaries(store),
        "reprocess": status_public(elastic, settings, intake),
        "llm_model": settings.llm.model if settings.llm_configured() else None,
    }
    return render(request, "admin.html", context)


@router.post("/admin/reprocess", name="ui_reprocess")
def start_reprocess(
    *,
    request: Request,
    elastic: ElasticStoreDep,
    settings: SettingsDep,
    intake: IntakeDep,
    _session: AdminPostedSessionDep,
    kind: Annotated[str, Form(max_length=20)] = "",
    model: Annotated[str, Form(max_length=500)] = "",
    dims: Annotated[str, Form(max_length=10)] = "",
    base_url: Annotated[str, Form(max_length=2000)] = "",
    rate: Annotated[str, Form(max_length=20)] = "",
    drop_old: Annotated[bool, Form()] = False,
    dry_run: Annotated[bool, Form()] = False,
) -> Response:
    """As ``POST /v1/admin/reprocess``: a re-embed started on a worker (back to the admin
    page, where its progress shows), or its plan (``dry_run``)."""
    fields = {"kind": kind, "model": model, "dims": dims, "base_url": base_url}
    embedder = {name: value.strip() for name, value in fields.items() if value.strip()}
    body = ReprocessCreate.model_validate(
        {
            "mode": "reembed",
            "embedder": embedder,
            "rate": rate.strip() or None,
            "drop_old": drop_old,
            "dry_run": dry_run,
        }
    )
    return started_or_planned(request, elastic, settings, intake, body)


@router.post("/admin/reextract", name="ui_reextract")
def start_reextract(
    *,
    request: Request,
    elastic: ElasticStoreDep,
    settings: SettingsDep,
    intake: IntakeDep,
    _session: AdminPostedSessionDep,
    tenant: Annotated[str, Form(max_length=200)] = "",
    rate: Annotated[str, Form(max_length=20)] = "",
    drop_old: Annotated[bool, Form()] = False,
    dry_run: Annotated[bool, Form()] = False,
) -> Response:
    """As ``POST /v1/admin/reprocess`` with mode ``reextract``: started on a worker (back to
    the admin page, where its progress shows), or its plan (``dry_run``)."""
    body = ReprocessCreate.model_validate(
        {
            "mode": "reextract",
            "tenant": tenant.strip() or None,
            "rate": rate.strip() or None,
            "drop_old": drop_old,
            "dry_run": dry_run,
        }
    )
    return started_or_planned(request, elastic, settings, intake, body)


def started_or_planned(
    request: Request,
    elastic: ElasticStore,
    settings: Settings,
    intake: Intake,
    body: ReprocessCreate,
) -> Response:
    run = run_of(settings, elastic, body)
    if body.dry_run:
        plan = plan_public(elastic, settings, run)
        context = {"plan": plan, "mode": body.mode, "tenant": body.tenant}
        return render(request, "reprocess_plan.html", context)
    start_public(elastic, settings, intake, run, str(request.url_for("ui_admin_page")))
    return see_other(str(request.url_for("ui_admin_page")) + "#index-versions")


@router.post("/admin/keys", name="ui_create_key")
def create_key(
    *,
    request: Request,
    keys: KeysDep,
    clock: ClockDep,
    _session: AdminPostedSessionDep,
    tenant: Annotated[str, Form(max_length=200)] = "",
    name: Annotated[str, Form(max_length=200)] = "",
    admin: Annotated[bool, Form()] = False,
) -> Response:
    """A new key, shown on this page only (it is stored as a hash)."""
    body = KeyCreate(tenant=tenant.strip(), name=name.strip(), admin=admin)
    key_id, token = keys.create(body.tenant, body.name, clock(), admin=body.admin)
    context = {"key_id": key_id, "tenant": body.tenant, "token": token}
    return render(request, "key_created.html", context, 201)


@router.get("/admin/keys/{key_id}/revoke", name="ui_revoke_page")
def confirm_revoke(request: Request, key_id: IdPath, _session: AdminSessionDep) -> Response:
    context = {
        "title": f"Revoke the key {key_id}?",
        "items": [f"the key {key_id}: every call and session made with it stops working"],
        "keys_hint": True,
        "action": str(request.url_for("ui_revoke_key", key_id=key_id)),
        "button": "Revoke the key",
        "back": str(request.url_for("ui_admin_page")),
    }
    return render(request, "confirm.html", context)


@router.post("/admin/keys/{key_id}/revoke", name="ui_revoke_key")
def revoke_key(
    request: Request,
    key_id: IdPath,
    keys: KeysDep,
    clock: ClockDep,
    _session: AdminPostedSessionDep,
) -> Response:
    keys.revoke(key_id, clock())
    return see_other(str(request.url_for("ui_admin_page")))
