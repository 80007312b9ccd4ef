"""Listing jobs: a tenant's jobs, newest first, by status, scope, batch and time, a page at a time.

A page is sorted by ``created_at`` then ``job_id`` (descending) and the cursor carries the last
job's sort values (``search_after``): stateless, so a listing holds nothing open on the store,
and a job accepted meanwhile never shifts a later page (it sorts before the first). The cursor
is opaque to callers: base64 of those values, tied to the filter it was made for, so it cannot
be replayed with another filter or by another tenant.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.errors import InvalidInputError

MAX_JOB_PAGE = 200


@dataclass(frozen=True)
class JobFilter:
    """Which jobs: those of ``tenant`` (None: every tenant, for operators), in any of
    ``statuses`` (empty: any), of a scope, of a batch, accepted in ``[since, until)``."""

    tenant: str | None
    statuses: tuple[JobStatus, ...] = ()
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    batch_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def clauses(self) -> list[dict[str, Any]]:
        """The filter as Elasticsearch term and range clauses over the jobs index."""
        terms = {
            "tenant": self.tenant,
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "run_id": self.run_id,
            "batch_id": self.batch_id,
        }
        clauses: list[dict[str, Any]] = [
            {"term": {field: value}} for field, value in terms.items() if value is not None
        ]
        if self.statuses:
            clauses.append({"terms": {"status": [s.value for s in self.statuses]}})
        window = {"gte": self.since, "lt": self.until}
        if any(v is not None for v in window.values()):
            bounds = {k: v.isoformat() for k, v in window.items() if v is not None}
            clauses.append({"range": {"created_at": bounds}})
        return clauses

    def fingerprint(self) -> str:
        """A short digest of the filter: a cursor is valid for this filter only."""
        text = json.dumps(self.clauses(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class JobPage:
    jobs: list[JobRecord]
    cursor: str | None  # None: this was the last page


def job_list_body(where: JobFilter, size: int, after: list[Any] | None) -> dict[str, Any]:
    """The search body of one page."""
    body: dict[str, Any] = {
        "query": {"bool": {"filter": where.clauses()}},
        "sort": [{"created_at": "desc"}, {"job_id": "desc"}],
        "size": size,
        "track_total_hits": False,
    }
    if after is not None:
        body["search_after"] = after
    return body


def encode_job_cursor(where: JobFilter, sort: list[Any]) -> str:
    raw = json.dumps({"f": where.fingerprint(), "after": sort}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_job_cursor(where: JobFilter, cursor: str) -> list[Any]:
    """The sort values a cursor resumes after; ``InvalidInputError`` for a cursor that is
    malformed or was made for another filter."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        after, made_for = data["after"], data["f"]
    except (binascii.Error, ValueError, TypeError, KeyError) as exc:
        raise InvalidInputError("malformed cursor", field="cursor") from exc
    if made_for != where.fingerprint() or not isinstance(after, list) or len(after) != 2:
        raise InvalidInputError("this cursor belongs to another listing", field="cursor")
    return after


def check_page_size(limit: int) -> None:
    if not 1 <= limit <= MAX_JOB_PAGE:
        raise InvalidInputError(f"limit must be 1..{MAX_JOB_PAGE}", field="limit")


class JobSearcher(Protocol):
    def search_jobs(self, body: dict[str, Any]) -> list[tuple[JobRecord, list[Any]]]: ...


def list_jobs(
    store: JobSearcher, where: JobFilter, limit: int = 50, cursor: str | None = None
) -> JobPage:
    """One page of jobs, newest first; pass the returned cursor for the next. Raises
    ``InvalidInputError`` for a bad ``limit`` or cursor."""
    check_page_size(limit)
    after = decode_job_cursor(where, cursor) if cursor else None
    hits = store.search_jobs(job_list_body(where, limit, after))
    jobs = [record for record, _ in hits]
    if len(hits) < limit:
        return JobPage(jobs, None)
    return JobPage(jobs, encode_job_cursor(where, hits[-1][1]))
