"""Chat-platform messages: deduplicated by event id, buffered per conversation in Redis, and
flushed as ONE job once the conversation has been quiet for ``MEMQ_CHAT_DEBOUNCE_S``.

The API only calls ``accept_event`` (a few Redis commands: well within the platforms' 3 s
deadlines); the flush is a task that re-schedules itself until the burst is over. While Redis
is down, an event becomes a job of its own, parked in Elasticsearch by the intake.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.exceptions import OperationalError
from pydantic import ValidationError

from pipeline.config import Settings
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.errors import InvalidInputError, TransientError
from pipeline.features.chat import ChatEvent
from pipeline.ingestion.capability import EXTRACTION, refusal
from workers.intake import submit
from workers.names import CHAT_FLUSH_TASK
from workers.runtime import MemqCelery

log = logging.getLogger("memq.worker")


def check_event(event: ChatEvent, tenant: str) -> None:
    """``InvalidInputError`` (a 4xx to the platform) unless ``event`` can become part of a job:
    checked on arrival, so one bad message never sinks the burst it would have joined."""
    try:
        conversation_request([event], tenant)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise InvalidInputError(f"unusable message ({where}: {error['msg']})") from exc


def accept_event(app: MemqCelery, event: ChatEvent) -> bool:
    """Buffer a verified event; False when it was a retry of one already accepted.
    ``InvalidInputError`` when the event could not be stored (nothing is buffered then)."""
    runtime, chat = app.runtime, app.runtime.settings.chat
    check_event(event, chat.tenant)
    buffer = runtime.chat_buffer
    try:
        if not buffer.first_time(event):
            return False
        if buffer.push(event, runtime.clock(), chat.max_buffered):
            schedule_flush(app, event.conversation, chat.debounce_s)
    except (TransientError, OperationalError) as exc:
        log.warning("chat buffer unreachable (%s): event %s queued alone", exc, event.event_id)
        return accept_alone(app, event)
    return True


def accept_alone(app: MemqCelery, event: ChatEvent) -> bool:
    """The event as a job of its own, for when its buffer (Redis) cannot be reached: the intake
    parks it in Elasticsearch, so the platform is answered at once and the message is kept.
    Its id is the event's, so the platform's retries of it make no second job (and a copy that
    the buffer did take before failing adds no second memory: dedup is by text within the
    scope). ``TransientError`` when Elasticsearch is down too."""
    tenant = app.runtime.settings.chat.tenant
    key = f"chat\x1f{event.platform}\x1f{event.event_id}"
    request = runnable_here(conversation_request([event], tenant), app.runtime.settings)
    return submit(app, request, idempotency_key=key).created


def schedule_flush(app: MemqCelery, conversation: str, countdown: float) -> None:
    app.send_task(
        CHAT_FLUSH_TASK,
        args=(conversation,),
        countdown=countdown,
        queue=app.runtime.settings.queues.io,
    )


def usable(events: list[ChatEvent], tenant: str) -> list[ChatEvent]:
    """The events that can be stored (all of them, unless one was buffered before arrival
    checks existed): one bad event never costs its burst-mates."""
    good = []
    for event in events:
        try:
            check_event(event, tenant)
        except InvalidInputError:
            log.warning("dropped an unusable chat event %s of %s", event.event_id, event.platform)
            continue
        good.append(event)
    return good


def conversation_request(events: list[ChatEvent], tenant: str) -> AddRequest:
    first = events[0]
    return AddRequest(
        scope=Scope(tenant=tenant, user_id=first.user_id, run_id=first.run_id),
        messages=[
            MessageIn.model_validate({"role": e.role, "content": e.content, "name": e.name})
            for e in events
        ],
        metadata={"source": first.platform, "conversation": first.conversation},
        timestamp=first.at,
    )


def runnable_here(request: AddRequest, settings: Settings) -> AddRequest:
    """``request`` as it can run under ``settings``. A chat conversation asks for extraction
    by memq's default, not by a caller's choice, so where no LLM is configured it is stored
    as it was said (``infer=false``, as ``memq backfill`` and ``memq demo`` do by default)
    instead of being queued to fail in extract; each such job is logged."""
    refused = refusal(request, settings)
    if refused is None or refused.field != EXTRACTION.field:
        return request
    log.warning(
        "chat conversation %s is stored verbatim (infer=false): %s",
        request.metadata.get("conversation"),
        refused.reason,
    )
    return request.model_copy(update={"infer": False})


def register_chat_tasks(app: MemqCelery) -> None:
    runtime = app.runtime

    @app.task(
        name=CHAT_FLUSH_TASK,
        shared=False,
        bind=True,
        max_retries=None,
        autoretry_for=(TransientError,),
        retry_backoff=runtime.settings.worker.retry_backoff_s,
        retry_backoff_max=runtime.settings.worker.retry_backoff_max_s,
        retry_jitter=True,
    )
    def flush(self: Any, conversation: str) -> str | None:
        """Submit the burst as one job once it is over; until then, come back later. The
        events stay buffered until the job exists, and a Redis or Elasticsearch fault is
        retried with backoff (a retried flush submits the same job: same idempotency key)."""
        chat = runtime.settings.chat
        taken = runtime.chat_buffer.peek_if_quiet(conversation, chat.debounce_s, runtime.clock())
        if isinstance(taken, float):
            raise self.retry(countdown=max(taken, 0.1), max_retries=None)
        if not taken:
            return None
        events = usable(taken, chat.tenant)
        job_id = None
        if events:
            key = f"chat:{conversation}:{events[0].event_id}"
            request = runnable_here(conversation_request(events, chat.tenant), runtime.settings)
            job_id = submit(app, request, idempotency_key=key).record.job_id
        if runtime.chat_buffer.drop(conversation, len(taken)):
            schedule_flush(app, conversation, chat.debounce_s)  # a new burst began meanwhile
        return job_id
