"""The intake: how the serving side (the API, the MCP server) hands work to the workers.

``Intake`` is what a request handler may ask of the queue side: accept a conversation as a
job, replay a dead job, buffer a chat-platform message, and forget a user's queued work. The
handler never sees how: ``workers.serving.CeleryIntake`` implements it over Celery and Redis,
and the API is given one when it is built (``api.resources``). Nothing here runs a phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pipeline.domain.jobs import JobRecord
from pipeline.domain.models import AddRequest
from pipeline.features.chat import ChatEvent
from pipeline.features.erase import UserErased
from pipeline.features.reprocess import ReprocessRun


@dataclass(frozen=True)
class Accepted:
    """The job a submitted conversation is: new (``created``) or one already known."""

    record: JobRecord
    created: bool


@runtime_checkable
class Intake(Protocol):
    """The queue side, as the serving side sees it. Failures raise ``MemqError``:
    ``InvalidInputError`` for a request that cannot be queued, ``TransientError`` when the
    broker is unreachable."""

    def submit(
        self,
        request: AddRequest,
        idempotency_key: str | None = None,
        batch_id: str | None = None,
        backfill: bool = False,
        request_id: str | None = None,
    ) -> Accepted:
        """Accept ``request`` as a job, or return the job it already is (same conversation,
        or same ``idempotency_key`` of the tenant). Answers without running anything. A new
        job's record names ``request_id``, the request that queued it (it has no part in the
        job's id)."""
        ...

    def replay(self, job_id: str) -> JobRecord:
        """Queue a ``dead`` or ``failed`` job again from its recorded request."""
        ...

    def accept_chat(self, event: ChatEvent) -> bool:
        """Buffer a verified chat-platform message; False when it repeats one already taken."""
        ...

    def held_job(self, job_id: str) -> JobRecord | None:
        """The ``queued`` record of a job accepted while Elasticsearch was down and not yet
        recorded there (rebuilt from its state); None for any other job."""
        ...

    def erase_user(self, tenant: str, user_id: str) -> UserErased:
        """Erase a user's data everywhere memq keeps it: the counts per place, and the ids of
        the user's jobs that were not finished."""
        ...

    def start_reprocess(self, run: ReprocessRun) -> str:
        """Send ``run`` to a worker; its run id. ``ConflictError`` while a run is active."""
        ...

    def active_reprocess(self) -> str | None:
        """The id of the reprocess running now (or waiting for a worker); None when none."""
        ...
