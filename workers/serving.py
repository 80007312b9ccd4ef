"""The intake of a serving process (the API, the MCP server): ``pipeline.ingestion.intake.Intake``
over a Celery app of its own. It stands above the modules it joins (``workers.app``, ``intake``,
``chat``, ``erase``) and none of them imports it, so every import here is at the top of the
module and hides no cycle."""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord
from pipeline.domain.models import AddRequest
from pipeline.features.chat import ChatEvent
from pipeline.features.erase import UserErased
from pipeline.features.reprocess import ReprocessRun
from pipeline.features.usage import check_spendable
from pipeline.ingestion.capability import check_runnable
from pipeline.ingestion.intake import Accepted
from workers.app import create_celery
from workers.chat import accept_event, chat_of
from workers.erase import erase_user_everywhere
from workers.intake import held_job, replay, submit
from workers.reprocess import active_reprocess, start_reprocess
from workers.runtime import MemqCelery

__all__ = ["CeleryIntake", "celery_intake"]


class CeleryIntake:
    """``pipeline.ingestion.intake.Intake`` over one Celery app: jobs go to its broker and queues,
    their state to its Redis, their records to its store."""

    def __init__(self, app: MemqCelery) -> None:
        self.app = app

    def submit(
        self,
        request: AddRequest,
        idempotency_key: str | None = None,
        batch_id: str | None = None,
        backfill: bool = False,
        request_id: str | None = None,
    ) -> Accepted:
        """Refuse (``InvalidInputError``) an add this deployment cannot run, such as one that
        asks for extraction where no LLM is configured, and (``BudgetSpentError``) one that
        needs the LLM while its tenant's monthly token budget is spent; else
        ``workers.intake.submit``."""
        runtime = self.app.runtime
        check_runnable(request, runtime.settings)
        vision = runtime.settings.llm.vision
        check_spendable(request, vision, runtime.usage, runtime.clock(), at_intake=True)
        return submit(self.app, request, idempotency_key, batch_id, backfill, request_id=request_id)

    def replay(self, job_id: str) -> JobRecord:
        return replay(self.app, job_id)

    def accept_chat(self, event: ChatEvent) -> bool:
        return accept_event(chat_of(self.app), event)

    def held_job(self, job_id: str) -> JobRecord | None:
        return held_job(self.app, job_id)

    def erase_user(self, tenant: str, user_id: str) -> UserErased:
        return erase_user_everywhere(self.app.runtime, tenant, user_id)

    def start_reprocess(self, run: ReprocessRun) -> str:
        runtime = self.app.runtime
        return start_reprocess(self.app, runtime.states, runtime.settings.queues, run)

    def active_reprocess(self) -> str | None:
        return active_reprocess(self.app.runtime.states)


def celery_intake(settings: Settings) -> CeleryIntake:
    """The intake of a serving process: a Celery app of its own for ``settings``, every task
    registered (chat flushes are sent by name). When tracing is configured, the tasks it sends
    carry the current trace, which the workers continue."""
    if settings.otel_endpoint is not None:
        # an optional instrumentation, loaded only where tracing is on (no cycle behind it)
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]
    return CeleryIntake(create_celery(settings))
