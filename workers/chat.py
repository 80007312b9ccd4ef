"""Chat-platform messages: deduplicated by event id, buffered per conversation in Redis, and
flushed as ONE job once the conversation has been quiet for ``MEMQ_CHAT_DEBOUNCE_S``.

The API only calls ``accept_event`` (a few Redis commands: well within the platforms' 3 s
deadlines); the flush is a task that re-schedules itself until the burst is over.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis

from pipeline.chat import ChatEvent
from pipeline.models import AddRequest, MessageIn, Scope
from workers.names import CHAT_FLUSH_TASK
from workers.state_store import redis_errors

if TYPE_CHECKING:
    from workers.app import MemqCelery

SEEN_TTL_S = 86_400


class ChatBuffer:
    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.prefix = f"memq:{namespace}:chat"

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

    def take_if_quiet(
        self, conversation: str, quiet_s: float, now: datetime
    ) -> list[ChatEvent] | float:
        """The burst's events once nothing arrived for ``quiet_s``; else the seconds left."""
        base = f"{self.prefix}:{conversation}"
        with redis_errors("flush chat events"):
            last = float(self.client.get(f"{base}:last") or 0)
            left = last + quiet_s - now.timestamp()
            if left > 0:
                return left
            pipe = self.client.pipeline()
            pipe.lrange(f"{base}:events", 0, -1)
            pipe.delete(f"{base}:events", f"{base}:scheduled")
            raw = pipe.execute()[0]
        return [event_from(json.loads(item)) for item in raw]


def event_from(data: dict[str, Any]) -> ChatEvent:
    return ChatEvent(**{**data, "at": datetime.fromisoformat(data["at"])})


def accept_event(app: MemqCelery, event: ChatEvent) -> bool:
    """Buffer a verified event; False when it was a retry of one already accepted."""
    runtime, chat = app.runtime, app.runtime.settings.chat
    buffer = runtime.chat_buffer
    if not buffer.first_time(event):
        return False
    if buffer.push(event, runtime.clock(), chat.max_buffered):
        app.send_task(
            CHAT_FLUSH_TASK,
            args=(event.conversation,),
            countdown=chat.debounce_s,
            queue=runtime.settings.queues.io,
        )
    return True


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

    @app.task(name=CHAT_FLUSH_TASK, bind=True, max_retries=None)
    def flush(self: Any, conversation: str) -> str | None:
        """Submit the burst as one job once it is over; until then, come back later."""
        chat = runtime.settings.chat
        taken = runtime.chat_buffer.take_if_quiet(conversation, chat.debounce_s, runtime.clock())
        if isinstance(taken, float):
            raise self.retry(countdown=max(taken, 0.1), max_retries=None)
        if not taken:
            return None
        key = f"chat:{conversation}:{taken[0].event_id}"
        return submit(
            app, conversation_request(taken, chat.tenant), idempotency_key=key
        ).record.job_id
