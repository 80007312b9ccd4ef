"""Chat-platform messages: deduplicated by event id, buffered per conversation in Redis, and
flushed as ONE job once the conversation has been quiet for ``MEMQ_CHAT_DEBOUNCE_S``.

The API only calls ``accept_event`` (a few Redis commands: well within the platforms' 3 s
deadlines); the flush is a task that re-schedules itself until the burst is over.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import redis
from pydantic import ValidationError

from pipeline.chat import ChatEvent
from pipeline.errors import InvalidInputError, TransientError
from pipeline.models import AddRequest, MessageIn, Scope
from workers.names import CHAT_FLUSH_TASK
from workers.state_store import redis_errors

if TYPE_CHECKING:
    from workers.app import MemqCelery

log = logging.getLogger("memq.worker")

SEEN_TTL_S = 86_400


# Drop the events a flush submitted (the first ARGV[1]); keep any that came in meanwhile. Returns
# how many are left: more than 0 means another flush must follow.
DROP_TAKEN = """
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
local left = redis.call('LLEN', KEYS[1])
if left == 0 then redis.call('DEL', KEYS[2]) end
return left
"""


class ChatBuffer:
    """A conversation's burst lives in Redis until the job made of it exists: a flush reads
    the events, submits the job, and only then drops what it submitted."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.prefix = f"memq:{namespace}:chat"
        self._drop = client.register_script(DROP_TAKEN)

    def first_time(self, event: ChatEvent) -> bool:
        """False for a platform's retry of an event already accepted."""
        key = f"{self.prefix}:seen:{event.platform}:{event.event_id}"
        with redis_errors("deduplicate a chat event"):
            return bool(self.client.set(key, 1, nx=True, ex=SEEN_TTL_S))

    def push(self, event: ChatEvent, now: datetime, limit: int) -> bool:
        """Buffer ``event``; True when this starts a burst (a flush must be scheduled)."""
        base = f"{self.prefix}:{event.conversation}"
        with redis_errors("buffer a chat event"):
            pipe = self.client.pipeline()
            pipe.rpush(f"{base}:events", json.dumps(asdict(event), default=str))
            pipe.ltrim(f"{base}:events", -limit, -1)
            pipe.set(f"{base}:last", now.timestamp(), ex=SEEN_TTL_S)
            pipe.set(f"{base}:scheduled", 1, nx=True, ex=SEEN_TTL_S)
            return bool(pipe.execute()[-1])

    def peek_if_quiet(
        self, conversation: str, quiet_s: float, now: datetime
    ) -> list[ChatEvent] | float:
        """The burst's events once nothing arrived for ``quiet_s`` (still buffered: ``drop``
        them once their job exists); else the seconds left."""
        base = f"{self.prefix}:{conversation}"
        with redis_errors("read chat events"):
            last = float(cast(bytes, self.client.get(f"{base}:last")) or 0)
            left = last + quiet_s - now.timestamp()
            if left > 0:
                return left
            raw = cast(list[bytes], self.client.lrange(f"{base}:events", 0, -1))
        return [event_from(json.loads(item)) for item in raw]

    def drop(self, conversation: str, count: int) -> int:
        """Drop the first ``count`` events; returns how many arrived since (to flush next)."""
        base = f"{self.prefix}:{conversation}"
        with redis_errors("drop flushed chat events"):
            left = self._drop(keys=[f"{base}:events", f"{base}:scheduled"], args=[count])
        return int(left)

    def erase_user(self, user_id: str) -> int:
        """Drop every buffered burst of ``user_id``; returns how many events went."""
        erased = 0
        with redis_errors("erase buffered chat events"):
            for key in self.client.scan_iter(match=f"{self.prefix}:*:events", count=500):
                raw = cast(list[bytes], self.client.lrange(key, 0, -1))
                if any(json.loads(item).get("user_id") == user_id for item in raw):
                    base = key.decode().removesuffix(":events")
                    self.client.delete(key, f"{base}:last", f"{base}:scheduled")
                    erased += len(raw)
        return erased


def event_from(data: dict[str, Any]) -> ChatEvent:
    return ChatEvent(**{**data, "at": datetime.fromisoformat(data["at"])})


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
    if not buffer.first_time(event):
        return False
    if buffer.push(event, runtime.clock(), chat.max_buffered):
        schedule_flush(app, event.conversation, chat.debounce_s)
    return True


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


def register_chat_tasks(app: MemqCelery) -> None:
    from workers.intake import submit

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
            request = conversation_request(events, chat.tenant)
            job_id = submit(app, request, idempotency_key=key).record.job_id
        if runtime.chat_buffer.drop(conversation, len(taken)):
            schedule_flush(app, conversation, chat.debounce_s)  # a new burst began meanwhile
        return job_id
