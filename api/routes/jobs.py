"""Jobs and batches."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, status

from api.body import UnicodeBody
from api.convert import batch_requests, job_public
from api.deps import IdPath, IntakeDep, PrincipalDep, SettingsDep, StoreDep
from api.limits import LimitsDep, ReadLimited, WriteLimited
from api.request_ids import request_id_of
from api.schemas import (
    BatchAccepted,
    BatchCreate,
    BatchPublic,
    JobAccepted,
    JobPage,
    JobPublic,
    WebhookSigning,
)
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.errors import InvalidInputError, NotFoundError, TransientError
from pipeline.features.webhook import tenant_signing_key
from pipeline.ingestion.intake import Intake
from pipeline.serving.job_listing import MAX_JOB_PAGE, JobFilter
from pipeline.serving.job_listing import list_jobs as listed_jobs
from pipeline.serving.keys import Principal
from pipeline.store.protocol import ServingStore

router = APIRouter(prefix="/v1", tags=["jobs"], dependencies=[UnicodeBody, ReadLimited])


def own_job(
    store: ServingStore, principal: Principal, job_id: str, intake: Intake | None = None
) -> JobRecord:
    """The caller's job. With ``intake``, a job accepted while Elasticsearch was down is found
    in Redis before its record is written, and while Elasticsearch is still down."""
    try:
        record = store.get_job(job_id)
    except TransientError:
        if intake is None or (record := intake.held_job(job_id)) is None:
            raise
    if record is None and intake is not None:
        record = intake.held_job(job_id)
    if record is None or record.tenant != principal.tenant:
        raise NotFoundError(f"no job {job_id}")
    return record


@router.get("/webhook-secret", response_model=WebhookSigning)
def webhook_secret(settings: SettingsDep, principal: PrincipalDep) -> WebhookSigning:
    """The key this tenant's job webhooks are signed with: ``X-Memq-Signature`` is
    ``sha256=hex(HMAC-SHA256(key, "{X-Memq-Timestamp}.{body}"))``."""
    secret = settings.webhook.signing_secret
    if secret is None:
        raise NotFoundError("webhook signing is not enabled on this server")
    key = tenant_signing_key(secret.get_secret_value(), principal.tenant)
    return WebhookSigning(key=key, header="X-Memq-Signature", timestamp_header="X-Memq-Timestamp")


@router.get("/jobs", response_model=JobPage)
def list_jobs(
    *,
    store: StoreDep,
    principal: PrincipalDep,
    status: Annotated[list[str] | None, Query(max_length=10)] = None,
    user_id: Annotated[str | None, Query(max_length=200)] = None,
    agent_id: Annotated[str | None, Query(max_length=200)] = None,
    run_id: Annotated[str | None, Query(max_length=200)] = None,
    batch_id: Annotated[str | None, Query(max_length=200)] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_JOB_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
) -> JobPage:
    """The caller's jobs, newest first: by status (``failed``, ``dead``, ``running``…), scope,
    batch, and acceptance time (``since`` inclusive, ``until`` exclusive). Page with
    ``next_cursor`` (valid for the same filters)."""
    where = JobFilter(
        tenant=principal.tenant,
        statuses=job_statuses(status),
        user_id=user_id,
        agent_id=agent_id,
        run_id=run_id,
        batch_id=batch_id,
        since=since,
        until=until,
    )
    page = listed_jobs(store, where, limit, cursor)
    return JobPage(results=[job_public(r) for r in page.jobs], next_cursor=page.cursor)


def job_statuses(given: list[str] | None) -> tuple[JobStatus, ...]:
    """``status`` as given (repeated, or comma-separated) as statuses; a 422 names a word that
    is not one."""
    words = [w.strip() for value in given or [] for w in value.split(",") if w.strip()]
    try:
        return tuple(JobStatus(word) for word in words)
    except ValueError as exc:
        known = ", ".join(s.value for s in JobStatus)
        raise InvalidInputError(f"status must be one of {known}", field="status") from exc


@router.get("/jobs/{job_id}", response_model=JobPublic, name="get_job")
def get_job(
    job_id: IdPath, store: StoreDep, intake: IntakeDep, principal: PrincipalDep
) -> JobPublic:
    """Status (queued, running, succeeded, failed, dead), phase, timings, results, errors."""
    return job_public(own_job(store, principal, job_id, intake))


@router.post(
    "/jobs/{job_id}/retry",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic,
    dependencies=[WriteLimited],
)
def retry_job(
    job_id: IdPath, store: StoreDep, intake: IntakeDep, principal: PrincipalDep
) -> JobPublic:
    """Replay a dead or failed job from its recorded request."""
    own_job(store, principal, job_id)
    return job_public(intake.replay(job_id))


@router.post(
    "/batches",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=BatchAccepted,
)
def create_batch(
    *,
    body: BatchCreate,
    request: Request,
    intake: IntakeDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    limits: LimitsDep,
) -> BatchAccepted:
    """Many conversations at once (importers): one job each, under one batch id. Every item is
    validated, and checked runnable here (an LLM for the items that need one), before any is
    queued, so a bad item queues nothing. It costs one write per item."""
    requests = batch_requests(body.items, principal, settings)
    limits.charge(principal.tenant, "write", cost=len(requests))
    batch_id = str(uuid.uuid4())
    jobs = []
    for add in requests:
        accepted = intake.submit(add, batch_id=batch_id, request_id=request_id_of(request))
        url = str(request.url_for("get_job", job_id=accepted.record.job_id))
        jobs.append(
            JobAccepted(
                job_id=accepted.record.job_id,
                status=accepted.record.status,
                status_url=url,
                created=accepted.created,
            )
        )
    url = str(request.url_for("get_batch", batch_id=batch_id))
    return BatchAccepted(batch_id=batch_id, status_url=url, jobs=jobs)


@router.get("/batches/{batch_id}", response_model=BatchPublic, name="get_batch")
def get_batch(batch_id: IdPath, store: StoreDep, principal: PrincipalDep) -> BatchPublic:
    """Counts of the batch's jobs per status (jobs that already existed when the batch was
    posted are counted in their first batch)."""
    counts = store.job_counts(tenant=principal.tenant, batch_id=batch_id)
    if not counts:  # posted a moment ago: its job records may not be searchable yet
        store.refresh_jobs()
        counts = store.job_counts(tenant=principal.tenant, batch_id=batch_id)
    if not counts:
        raise NotFoundError(f"no batch {batch_id}")
    return BatchPublic(batch_id=batch_id, total=sum(counts.values()), counts=counts)
