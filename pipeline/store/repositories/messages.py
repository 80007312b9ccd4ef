"""Messages: one document per message (the full record, for provenance and erasure) and one
window document per session (its last messages, read by id by the next job)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pipeline.domain.jobs import JobRecord
from pipeline.domain.models import NAMESPACE, ContextMessage, Scope, message_id
from pipeline.store.client import es_errors
from pipeline.store.indices import Kind
from pipeline.store.protocol import SessionMessages
from pipeline.store.reads import StoredMessage
from pipeline.store.repositories.base import Connection, Repository
from pipeline.store.repositories.jobs import JobRepository
from pipeline.store.routing import scope_routing

WINDOW_KEEP = 50  # messages kept in a session's window document (phases read the last 10)


def window_id(scope: Scope) -> str:
    return str(uuid.uuid5(NAMESPACE, f"window\x1f{scope.key}"))


class MessageRepository(Repository):
    kind = Kind.MESSAGES

    def __init__(self, connection: Connection, jobs: JobRepository) -> None:
        super().__init__(connection)
        self.jobs = jobs  # a job's messages and its record are saved in one bulk

    def recent_messages(self, scope: Scope, limit: int) -> list[ContextMessage]:
        return self.recent_messages_many([scope], limit)[0]

    def recent_messages_many(
        self, scopes: Sequence[Scope], limit: int
    ) -> list[list[ContextMessage]]:
        """Each scope's window document, read by id in one mget: realtime, so the session's
        previous job is always seen, with no index refresh to wait for."""
        return [
            [ContextMessage.model_validate(e["message"]) for e in window[-limit:]]
            for window in self._windows(scopes)
        ]

    def append_messages(
        self, scope: Scope, job_id: str, messages: Sequence[ContextMessage], at: datetime
    ) -> None:
        self.finish_jobs([SessionMessages(scope, job_id, list(messages), at)], [])

    def finish_jobs(self, entries: Sequence[SessionMessages], records: Sequence[JobRecord]) -> None:
        """One read of the windows, then one bulk: one document per message (the full record),
        each window document extended with its job's messages (replaying a job does not append
        them twice), and the job records. Jobs of one session run one at a time, so a window's
        read-modify-write has no rival."""
        entries = [entry for entry in entries if entry.messages]
        actions: list[dict[str, Any]] = []
        windows = self._windows([entry.scope for entry in entries]) if entries else []
        for entry, window in zip(entries, windows, strict=True):
            actions += self._message_actions(entry, window)
        actions += self.jobs.record_actions(records)
        if actions:
            self.connection.bulk_all_or_raise(actions, "save messages and job records")

    def _message_actions(
        self, entry: SessionMessages, window: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        scope, job_id, at = entry.scope, entry.job_id, entry.at
        routing = scope_routing(scope)
        header = {"_index": self.index, "routing": routing}
        actions: list[dict[str, Any]] = []
        for seq, message in enumerate(entry.messages):
            actions.append({"index": {**header, "_id": message_id(job_id, seq)}})
            actions.append(
                {
                    **scope.fields(),
                    "kind": "message",
                    "session_key": scope.key,
                    "job_id": job_id,
                    "seq": seq,
                    "role": message.role,
                    "name": message.name,
                    "content": message.content,
                    "created_at": at.isoformat(),
                }
            )
        if any(item["job_id"] == job_id for item in window):
            return actions
        window = window + [
            {"job_id": job_id, "seq": seq, "message": m.model_dump()}
            for seq, m in enumerate(entry.messages)
        ]
        actions.append({"index": {**header, "_id": window_id(scope)}})
        actions.append(
            {
                **scope.fields(),
                "kind": "window",
                "session_key": scope.key,
                "job_id": job_id,
                "window": window[-WINDOW_KEEP:],
                "created_at": at.isoformat(),
            }
        )
        return actions

    def _windows(self, scopes: Sequence[Scope]) -> list[list[dict[str, Any]]]:
        if not scopes:
            return []
        with es_errors("read the message windows"):
            docs = self.connection.client.mget(
                index=self.index,
                docs=[{"_id": window_id(s), "routing": scope_routing(s)} for s in scopes],
                source_includes=["window"],
            ).body["docs"]
        return [d["_source"].get("window", []) if d.get("found") else [] for d in docs]

    def get_messages(self, ids: Sequence[str], routing: str) -> dict[str, StoredMessage]:
        """The stored messages among ``ids`` (all on the shard of ``routing``, their scope's):
        id -> message, in one realtime mget; an id with no message (erased) is left out."""
        if not ids:
            return {}
        with es_errors("read messages"):
            docs = self.connection.client.mget(
                index=self.index, ids=list(ids), routing=routing
            ).body["docs"]
        return {
            d["_id"]: StoredMessage.from_source(d["_id"], d["_source"])
            for d in docs
            if d.get("found")
        }
