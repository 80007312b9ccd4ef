"""The messages index and session windows in memory (``repositories.messages``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pipeline.domain.models import ContextMessage, Scope, message_id
from pipeline.store.memory.tables import Tables


class MessagesInMemory(Tables):
    def recent_messages(self, scope: Scope, limit: int) -> list[ContextMessage]:
        with self._lock:
            window = [m for m in self.messages.values() if m["session_key"] == scope.key]
        window.sort(key=lambda m: (m["created_at"], m["seq"]))
        return [
            ContextMessage(role=m["role"], content=m["content"], name=m["name"])
            for m in window[-limit:]
        ]

    def append_messages(
        self, scope: Scope, job_id: str, messages: Sequence[ContextMessage], at: datetime
    ) -> None:
        with self._lock:
            for seq, message in enumerate(messages):
                self.messages[message_id(job_id, seq)] = {
                    "session_key": scope.key,
                    "seq": seq,
                    "created_at": at,
                    **message.model_dump(),
                }

    def recent_messages_many(
        self, scopes: Sequence[Scope], limit: int
    ) -> list[list[ContextMessage]]:
        return [self.recent_messages(scope, limit) for scope in scopes]
