"""Chat-platform messages: deduplicated by event id, buffered per conversation in Redis, and
flushed as ONE job once the conversation has been quiet for ``MEMQ_CHAT_DEBOUNCE_S``.

The API only calls ``accept_event`` (a few Redis commands: well within the platforms' 3 s
deadlines); the flush is a task that re-schedules itself until the burst is over. While Redis
is down, an event becomes a job of its own, parked in Elasticsearch by the intake.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from kombu.exceptions import OperationalError
from pydantic import ValidationError

from pipeline.config import ChatConfig, Settings
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.errors import InvalidInputError, TransientError
from pipeline.features.chat import ChatEvent
from pipeline.ingestion.capability import EXTRACTION, refusal
from pipeline.ingestion.intake import Accepted
from workers.intake import IntakeParts, accept, intake_of
from workers.names import CHAT_FLUSH_TASK
from workers.queues import TaskSender
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


class Buffer(Protocol):
    """Where a conversation's events wait until it has been quiet (``ChatBuffer``, in Redis).
    Each raises ``TransientError`` when it cannot be reached."""

    def first_time(self, event: ChatEvent) -> bool:
        """False for a platform's retry of an event already accepted."""
        ...

    def push(self, event: ChatEvent, now: datetime, limit: int) -> bool:
        """Buffer ``event``; True when its conversation had no flush scheduled."""
        ...

    def peek_if_quiet(
        self, conversation: str, quiet_s: float, now: datetime
    ) -> list[ChatEvent] | float:
        """The burst's events once it is quiet; else the seconds left."""
        ...

    def drop(self, conversation: str, count: int) -> int:
        """Drop the first ``count`` events; how many arrived since."""
        ...


@dataclass(frozen=True)
class ChatParts:
    """What taking chat messages needs: the buffer, the intake a burst becomes a job through
    (its settings and clock too), and what sends the flush task."""

    buffer: Buffer
    intake: IntakeParts
    sender: TaskSender

    @property
    def settings(self) -> Settings:
        return self.intake.settings

    @property
    def config(self) -> ChatConfig:
        return self.settings.chat


@dataclass(frozen=True)
class Flush:
    """What a flush did: the job its burst became (None when no event was usable), or, while
    the burst goes on, the seconds to wait before trying again."""

    job_id: str | None = None
    wait_s: float | None = None


def chat_of(app: MemqCelery) -> ChatParts:
    """The chat intake of this process's app."""
    return ChatParts(buffer=app.runtime.chat_buffer, intake=intake_of(app), sender=app)


def accept_event(chat: ChatParts, event: ChatEvent) -> bool:
    """Buffer a verified event; False when it was a retry of one already accepted.
    ``InvalidInputError`` when the event could not be stored (nothing is buffered then)."""
    check_event(event, chat.config.tenant)
    try:
        if not chat.buffer.first_time(event):
            return False
        if chat.buffer.push(event, chat.intake.clock(), chat.config.max_buffered):
            schedule_flush(chat, event.conversation)
    except (TransientError, OperationalError) as exc:
        log.warning("chat buffer unreachable (%s): event %s queued alone", exc, event.event_id)
        return accept_alone(chat, event)
    return True


def accept_alone(chat: ChatParts, event: ChatEvent) -> bool:
    """The event as a job of its own, for when its buffer (Redis) cannot be reached: the intake
    parks it in Elasticsearch, so the platform is answered at once and the message is kept.
    Its id is the event's, so the platform's retries of it make no second job (and a copy that
    the buffer did take before failing adds no second memory: dedup is by text within the
    scope). ``TransientError`` when Elasticsearch is down too."""
    key = f"chat\x1f{event.platform}\x1f{event.event_id}"
    return submit_events(chat, [event], key).created


def submit_events(chat: ChatParts, events: list[ChatEvent], key: str) -> Accepted:
    """``events`` as one job of the chat tenant, as it can run here, under the idempotency
    ``key``."""
    request = runnable_here(conversation_request(events, chat.config.tenant), chat.settings)
    return accept(chat.intake, request, key)


def schedule_flush(chat: ChatParts, conversation: str) -> None:
    """A flush of ``conversation`` once it may have been quiet for the debounce."""
    chat.sender.send_task(
        CHAT_FLUSH_TASK,
        args=(conversation,),
        countdown=chat.config.debounce_s,
        queue=chat.settings.queues.io,
    )


def flush(chat: ChatParts, conversation: str) -> Flush:
    """Submit the burst as one job once it is over; until then, say how long to wait. The
    events stay buffered until the job exists (a flush run again submits the same job: same
    idempotency key), and a burst begun meanwhile gets a flush of its own."""
    quiet_s = chat.config.debounce_s
    taken = chat.buffer.peek_if_quiet(conversation, quiet_s, chat.intake.clock())
    if isinstance(taken, float):
        return Flush(wait_s=max(taken, 0.1))
    if not taken:
        return Flush()
    events = usable(taken, chat.config.tenant)
    job_id = None
    if events:
        key = f"chat:{conversation}:{events[0].event_id}"
        job_id = submit_events(chat, events, key).record.job_id
    if chat.buffer.drop(conversation, len(taken)):
        schedule_flush(chat, conversation)  # a new burst began meanwhile
    return Flush(job_id=job_id)


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
    def flush_task(self: Any, conversation: str) -> str | None:
        """``flush``, come back while the burst goes on; a Redis or Elasticsearch fault is
        retried with backoff."""
        done = flush(chat_of(app), conversation)
        if done.wait_s is not None:
            raise self.retry(countdown=done.wait_s, max_retries=None)
        return done.job_id
