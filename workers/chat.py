"""Chat-platform messages: deduplicated by event id, buffered per conversation in Redis, and
flushed as ONE job once the conversation has been quiet for ``MEMQ_CHAT_DEBOUNCE_S``.

The API only calls ``accept_event`` (a few Redis commands: well within the platforms' 3 s
deadlines); the flush is a task that re-schedules itself until the burst is over.
"""

from __future__ import annotations

from typing import Any

from pipeline.chat import ChatEvent
from pipeline.models import AddRequest, MessageIn, Scope
from workers.intake import submit
from workers.names import CHAT_FLUSH_TASK
from workers.runtime import MemqCelery


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
