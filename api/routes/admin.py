"""Admin routes: API keys (create, list, revoke), each tenant's usage and token budget, and
the index versions of ``memq reprocess``."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from api.convert import budget_public, report_public
from api.deps import (
    AdminDep,
    ClockDep,
    ElasticStoreDep,
    IdPath,
    IntakeDep,
    KeysDep,
    SettingsDep,
    UsageDep,
)
from api.reprocess import plan_public, run_of, start_public, status_public
from api.schemas import (
    BudgetPublic,
    BudgetSet,
    KeyCreate,
    KeyCreated,
    KeyPublic,
    Message,
    ReprocessCreate,
    ReprocessPlanPublic,
    ReprocessStartedPublic,
    ReprocessStatusPublic,
    UsageReportPublic,
)
from pipeline.domain.models import Identifier
from pipeline.features.usage import month_of, usage_report, utc_day
from pipeline.store.reads import ListedKey

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.post("/keys", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
def create_key(body: KeyCreate, keys: KeysDep, clock: ClockDep, _admin: AdminDep) -> KeyCreated:
    """A new key for a tenant; the full key is in this answer only."""
    key_id, token = keys.create(body.tenant, body.name, clock(), admin=body.admin)
    return KeyCreated(id=key_id, tenant=body.tenant, key=token)


@router.get("/keys", response_model=list[KeyPublic])
def list_keys(keys: KeysDep, _admin: AdminDep, tenant: str | None = None) -> list[ListedKey]:
    return keys.list(tenant)


@router.delete("/keys/{key_id}", response_model=Message)
def revoke_key(key_id: IdPath, keys: KeysDep, clock: ClockDep, _admin: AdminDep) -> Message:
    keys.revoke(key_id, clock())
    return Message(message=f"key {key_id} revoked")


@router.get("/usage", response_model=UsageReportPublic)
def tenant_usage(
    tenant: Annotated[Identifier, Query(description="the tenant")],
    usage: UsageDep,
    clock: ClockDep,
    _admin: AdminDep,
    first: Annotated[
        date | None, Query(alias="from", description="first UTC day (default: this month's 1st)")
    ] = None,
    last: Annotated[
        date | None, Query(alias="to", description="last UTC day (default: today)")
    ] = None,
) -> UsageReportPublic:
    """A tenant's usage on each UTC day from ``from`` to ``to`` (at most 366 days), their sum,
    and its monthly token budget with this month's tokens."""
    return report_public(usage_report(usage, tenant, first, last, clock()))


@router.get("/budgets", response_model=list[BudgetPublic])
def list_budgets(usage: UsageDep, clock: ClockDep, _admin: AdminDep) -> list[BudgetPublic]:
    """Every tenant's monthly token budget that is set, with this month's tokens."""
    month = month_of(utc_day(clock()))
    return [
        budget_public(tenant, usage.budget_state(tenant, month), month)
        for tenant in sorted(usage.budgets())
    ]


@router.put("/budgets/{tenant}", response_model=BudgetPublic)
def set_budget(
    tenant: IdPath, body: BudgetSet, usage: UsageDep, clock: ClockDep, _admin: AdminDep
) -> BudgetPublic:
    """Set (or raise, or lower) a tenant's monthly token budget; it holds from the next add."""
    usage.set_budget(tenant, body.monthly_tokens)
    month = month_of(utc_day(clock()))
    return budget_public(tenant, usage.budget_state(tenant, month), month)


@router.delete("/budgets/{tenant}", response_model=Message)
def remove_budget(tenant: IdPath, usage: UsageDep, _admin: AdminDep) -> Message:
    """Remove a tenant's monthly token budget: its extraction is no longer capped."""
    usage.set_budget(tenant, None)
    return Message(message=f"tenant {tenant} has no token budget")


@router.get("/reprocess", response_model=ReprocessStatusPublic)
def reprocess_status(
    store: ElasticStoreDep, settings: SettingsDep, intake: IntakeDep, _admin: AdminDep
) -> ReprocessStatusPublic:
    """The embedder in use, each version of the memories and entities with the progress a
    reprocess recorded in it, and whether a run is active now (it holds the reprocess lock,
    which lapses within 15 s of its process's death: a ``progress`` whose stage is neither
    ``switched`` nor ``failed`` while ``active`` is false is a run that was stopped; start it
    again with the same embedder and it resumes)."""
    return status_public(store, settings, intake)


@router.post(
    "/reprocess",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ReprocessStartedPublic | ReprocessPlanPublic,
    responses={
        200: {"model": ReprocessPlanPublic, "description": "the plan of a dry run"},
        409: {"description": "a run is active, or the version in use is of that embedder"},
    },
)
def start_reprocess(
    *,
    body: ReprocessCreate,
    request: Request,
    response: Response,
    store: ElasticStoreDep,
    settings: SettingsDep,
    intake: IntakeDep,
    _admin: AdminDep,
) -> ReprocessStartedPublic | ReprocessPlanPublic:
    """Rebuild the memories and entities into a new index version on a worker (as ``memq
    reprocess``), memq serving meanwhile: 202 at once, the progress at the status URL.
    ``dry_run``: 200 with the cost, nothing started. A stopped run resumes when started again
    with the same embedder."""
    run = run_of(settings, store, body)
    if body.dry_run:
        response.status_code = status.HTTP_200_OK
        return plan_public(store, settings, run)
    url = str(request.url_for("reprocess_status"))
    return start_public(store, settings, intake, run, url)
