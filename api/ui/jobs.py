"""Jobs: the list (``GET /v1/jobs``'s filters), one job with its phases, counts, tokens,
errors and reason, replay of a failed or dead one, and a batch's progress, live."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request, Response

from api.deps import IntakeDep, StoreDep
from api.limits import LimitsDep
from api.routes.jobs import job_statuses, own_job
from api.ui.core import PageRoute, PostedSessionDep, SessionDep, render, see_other
from pipeline.domain.jobs import ACTIVE_STATUSES, JobStatus
from pipeline.errors import NotFoundError
from pipeline.features.explorer import parse_time
from pipeline.serving.job_listing import JobFilter, list_jobs
from pipeline.store.protocol import ServingStore

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False)
Id = Annotated[str, Query(max_length=200)]
PAGE = 50


@router.get("/jobs", name="ui_jobs_page")
def jobs_page(
    *,
    request: Request,
    store: StoreDep,
    session: SessionDep,
    status: Annotated[str, Query(max_length=100)] = "",
    user_id: Id = "",
    batch_id: Id = "",
    since: Annotated[str, Query(max_length=64)] = "",
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
) -> Response:
    where = JobFilter(
        tenant=session.tenant,
        statuses=job_statuses([status] if status else None),
        user_id=user_id.strip() or None,
        batch_id=batch_id.strip() or None,
        since=parse_time(since, "since"),
    )
    page = list_jobs(store, where, PAGE, cursor)
    form = {"status": status, "user_id": user_id, "batch_id": batch_id, "since": since}
    next_url = None
    if page.cursor:
        next_url = f"{request.url_for('ui_jobs_page')}?{urlencode(form | {'cursor': page.cursor})}"
    context = {
        "jobs": page.jobs,
        "form": form,
        "statuses": [s.value for s in JobStatus],
        "next_url": next_url,
        **progress_context(request, store, session.tenant),
    }
    return render(request, "jobs.html", context)


@router.get("/progress", name="ui_progress")
def progress(request: Request, store: StoreDep, session: SessionDep) -> Response:
    """The tenant's jobs per status, the fragment the jobs page polls while any is unfinished
    (a backfill's progress, say)."""
    context = progress_context(request, store, session.tenant)
    return render(request, "progress.html", context)


@router.get("/jobs/{job_id}", name="ui_job_page")
def job_page(
    request: Request, job_id: str, store: StoreDep, intake: IntakeDep, session: SessionDep
) -> Response:
    job = own_job(store, session.principal, job_id, intake)
    tokens = {k: v for k, v in job.counts.items() if "token" in k}
    counts = {k: v for k, v in job.counts.items() if k not in tokens}
    context = {"job": job, "tokens": tokens, "counts": counts}
    return render(request, "job.html", context)


@router.post("/jobs/{job_id}/replay", name="ui_replay_job")
def replay_job(
    *,
    request: Request,
    job_id: str,
    store: StoreDep,
    intake: IntakeDep,
    limits: LimitsDep,
    session: PostedSessionDep,
) -> Response:
    """As ``POST /v1/jobs/{id}/retry``: queue a failed or dead job again."""
    limits.charge(session.tenant, "write")
    own_job(store, session.principal, job_id)
    intake.replay(job_id)
    return see_other(str(request.url_for("ui_job_page", job_id=job_id)))


@router.get("/batches/{batch_id}", name="ui_batch_page")
def batch_page(request: Request, batch_id: str, store: StoreDep, session: SessionDep) -> Response:
    """A batch's jobs per status; the counts refresh themselves while any job is unfinished."""
    context = progress_context(request, store, session.tenant, batch_id)
    return render(request, "batch.html", context)


@router.get("/batches/{batch_id}/progress", name="ui_batch_progress")
def batch_progress(
    request: Request, batch_id: str, store: StoreDep, session: SessionDep
) -> Response:
    """The progress fragment the batch page polls."""
    context = progress_context(request, store, session.tenant, batch_id)
    return render(request, "progress.html", context)


def progress_context(
    request: Request, store: ServingStore, tenant: str, batch_id: str | None = None
) -> dict[str, object]:
    """Jobs per status of the tenant (or of one of its batches: ``NotFoundError`` when it has
    none), how many ended, and where the fragment polls for the next counts."""
    counts = store.job_counts(tenant=tenant, batch_id=batch_id)
    if batch_id is not None and not counts:
        raise NotFoundError(f"no batch {batch_id}")
    total = sum(counts.values())
    active = sum(counts.get(s.value, 0) for s in ACTIVE_STATUSES)
    if batch_id is None:
        poll, listed = request.url_for("ui_progress"), f"{request.url_for('ui_jobs_page')}?"
    else:
        poll = request.url_for("ui_batch_progress", batch_id=batch_id)
        listed = f"{request.url_for('ui_jobs_page')}?{urlencode({'batch_id': batch_id})}&"
    return {
        "batch_id": batch_id,
        "counts": counts,
        "total": total,
        "done": total - active,
        "percent": round(100 * (total - active) / total) if total else 100,
        "live": active > 0,
        "poll_url": str(poll),
        "jobs_url": listed,
    }
