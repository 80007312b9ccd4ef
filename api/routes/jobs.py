"""Jobs and batches."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, status

from api.body import UnicodeBody
from api.convert import batch_requests, job_public
from api.deps import IdPath, IntakeDep, PrincipalDep, SettingsDep, StoreDep
from api.limits import WriteLimited
from api.schemas import BatchAccepted, BatchCreate, BatchPublic, JobAccepted, JobPublic
from pipeline.errors import NotFoundError
from pipeline.jobs import JobRecord
from pipeline.keys import Principal
from pipeline.store.protocol import ServingStore
from pipeline.webhook import tenant_signing_key

router = APIRouter(prefix="/v1", tags=["jobs"], dependencies=[UnicodeBody])


def own_job(store: ServingStore, principal: Principal, job_id: str) -> JobRecord:
    record = store.get_job(job_id)
    if record is None or record.tenant != principal.tenant:
        raise NotFoundError(f"no job {job_id}")
    return record


@router.get("/webhook-secret")
def webhook_secret(settings: SettingsDep, principal: PrincipalDep) -> dict[str, str]:
    """The key this tenant's job webhooks are signed with: ``X-Memq-Signature`` is
    ``sha256=hex(HMAC-SHA256(key, "{X-Memq-Timestamp}.{body}"))``."""
    secret = settings.webhook.signing_secret
    if secret is None:
        raise NotFoundError("webhook signing is not enabled on this server")
    key = tenant_signing_key(secret.get_secret_value(), principal.tenant)
    return {"key": key, "header": "X-Memq-Signature", "timestamp_header": "X-Memq-Timestamp"}


@router.get("/jobs/{job_id}", response_model=JobPublic, name="get_job")
def get_job(job_id: IdPath, store: StoreDep, principal: PrincipalDep) -> JobPublic:
    """Status (queued, running, succeeded, failed, dead), phase, timings, results, errors."""
    return job_public(own_job(store, principal, job_id))


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
    dependencies=[WriteLimited],
)
def create_batch(
    body: BatchCreate,
    request: Request,
    intake: IntakeDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> BatchAccepted:
    """Many conversations at once (importers): one job each, under one batch id. Every item is
    validated, and checked runnable here (an LLM for the items that need one), before any is
    queued, so a bad item queues nothing."""
    requests = batch_requests(body.items, principal, settings)
    batch_id = str(uuid.uuid4())
    jobs = []
    for add in requests:
        accepted = intake.submit(add, batch_id=batch_id)
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
