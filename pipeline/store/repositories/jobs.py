"""Job records: saved by the intake and the workers, listed and counted for the API, the
operators' views and ``memq status``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elasticsearch import NotFoundError

from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.errors import TransientError
from pipeline.store.client import error_reason, es_errors
from pipeline.store.indices import Kind
from pipeline.store.reads import JobSummary
from pipeline.store.repositories.base import Repository

STATUS_AGGREGATION = {"status": {"terms": {"field": "status", "size": 10}}}


def jobs_query(
    tenant: str | None, batch_id: str | None, user_id: str | None = None
) -> dict[str, Any]:
    """The job records of ``tenant``, ``batch_id`` and ``user_id`` (any left out: any)."""
    terms = {"tenant": tenant, "batch_id": batch_id, "user_id": user_id}
    clauses = [{"term": {k: v}} for k, v in terms.items() if v is not None]
    return {"bool": {"filter": clauses}}


class JobRepository(Repository):
    kind = Kind.JOBS

    def record_actions(self, records: Sequence[JobRecord]) -> list[dict[str, Any]]:
        """Bulk actions writing ``records`` whole (a record is rewritten, never merged)."""
        actions: list[dict[str, Any]] = []
        for record in records:
            actions.append({"index": {"_index": self.index, "_id": record.job_id}})
            actions.append(record.model_dump(mode="json"))
        return actions

    def save_job(self, record: JobRecord) -> None:
        with es_errors(f"save job {record.job_id}"):
            self.connection.client.index(
                index=self.index, id=record.job_id, document=record.model_dump(mode="json")
            )

    def save_jobs(self, records: Sequence[JobRecord]) -> None:
        """Write several job records in one bulk."""
        actions = self.record_actions(records)
        if actions:
            self.connection.bulk_all_or_raise(actions, "save job records")

    def create_job(self, record: JobRecord) -> JobRecord | None:
        """Write ``record`` unless the job has a record already, and return that one (None
        when this call wrote it): one request, an upsert that leaves an existing record as it
        is (a no-op) and answers with the record it found."""
        with es_errors(f"create job {record.job_id}"):
            reply = self.connection.client.update(
                index=self.index,
                id=record.job_id,
                doc={},
                upsert=record.model_dump(mode="json"),
                source=True,
                retry_on_conflict=3,  # two intakes of one job at once: the second finds it
            ).body
        if reply["result"] == "created":
            return None
        return JobRecord.model_validate(reply["get"]["_source"])

    def get_job(self, job_id: str) -> JobRecord | None:
        with es_errors(f"read job {job_id}"):
            try:
                body = self.connection.client.get(index=self.index, id=job_id).body
            except NotFoundError:
                return None
        return JobRecord.model_validate(body["_source"])

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord | None]:
        """The record of each job (None when there is none), one round trip."""
        if not job_ids:
            return {}
        with es_errors("read jobs"):
            docs = self.connection.client.mget(index=self.index, ids=list(job_ids)).body["docs"]
        return {
            d["_id"]: JobRecord.model_validate(d["_source"]) if d.get("found") else None
            for d in docs
        }

    def parked_jobs(self, limit: int, fresh: bool = False) -> list[JobRecord]:
        """Jobs accepted while Redis was down and not yet in their session's lines: ``queued``
        records marked ``parked``, oldest first. ``fresh``: refresh the jobs index first, so a
        record written a moment ago is seen (a search sees only refreshed documents)."""
        query = {
            "bool": {
                "filter": [
                    {"term": {"parked": True}},
                    {"term": {"status": JobStatus.QUEUED.value}},
                ]
            }
        }
        with es_errors("list parked jobs"):
            if fresh:
                self.connection.client.indices.refresh(index=self.index)
            hits = self.connection.client.search(
                index=self.index,
                query=query,
                sort=[{"created_at": "asc"}, {"job_id": "asc"}],
                size=limit,
            ).body["hits"]["hits"]
        return [JobRecord.model_validate(hit["_source"]) for hit in hits]

    def unpark_jobs(self, job_ids: Sequence[str]) -> None:
        """Clear ``parked`` on these records (their jobs joined their lines). A record the
        workers rewrote meanwhile is rewritten unparked anyway; a missing one is skipped."""
        actions: list[dict[str, Any]] = []
        for job_id in job_ids:
            actions.append({"update": {"_index": self.index, "_id": job_id}})
            actions.append({"doc": {"parked": False}})
        if not actions:
            return
        with es_errors("unpark jobs"):
            body = self.connection.bulk(operations=actions)
        for item in body["items"] if body.get("errors") else []:
            result = item["update"]
            if result.get("error") and result["status"] != 404:
                raise TransientError(f"unpark jobs: {error_reason(result['error'])}")

    def search_jobs(self, body: dict[str, Any]) -> list[tuple[JobRecord, list[Any]]]:
        """The jobs a listing's search body finds, each with its sort values."""
        with es_errors("list jobs"):
            hits = self.connection.client.search(index=self.index, **body).body["hits"]["hits"]
        return [(JobRecord.model_validate(hit["_source"]), hit["sort"]) for hit in hits]

    def job_counts(
        self, tenant: str | None = None, batch_id: str | None = None, user_id: str | None = None
    ) -> dict[str, int]:
        """How many jobs are in each status: all of them, or a tenant's (batch's, user's).
        Counted on the searchable records (near real time: ``refresh_jobs`` first to count a
        job just saved)."""
        query = jobs_query(tenant, batch_id, user_id)
        with es_errors("count jobs by status"):
            body = self.connection.client.search(
                index=self.index, size=0, query=query, aggs=STATUS_AGGREGATION
            ).body
        return {b["key"]: b["doc_count"] for b in body["aggregations"]["status"]["buckets"]}

    def jobs_in_status(self, status: str, limit: int) -> list[JobSummary]:
        """The latest ``limit`` jobs in ``status``: their id, reason and last update."""
        with es_errors(f"list {status} jobs"):
            body = self.connection.client.search(
                index=self.index,
                size=limit,
                query={"term": {"status": status}},
                sort=[{"updated_at": "desc"}],
                source_includes=["job_id", "reason", "updated_at"],
            ).body
        return [JobSummary.model_validate(h["_source"]) for h in body["hits"]["hits"]]

    def refresh_jobs(self) -> None:
        """Make every saved job record searchable now."""
        with es_errors("refresh jobs"):
            self.connection.client.indices.refresh(index=self.index)
