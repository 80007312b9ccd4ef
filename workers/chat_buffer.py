"""The Redis side of chat-platform messages: which events were seen, and each conversation's
buffer of events until it has been quiet long enough to be flushed as one job."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any, cast

import redis

from pipeline.adapters.redis_errors import redis_errors
from pipeline.adapters.redis_scripts import register
from pipeline.features.chat import ChatEvent

SEEN_TTL_S = 86_400


class ChatBuffer:
    """A conversation's burst lives in Redis until the job made of it exists: a flush reads
    the events, submits the job, and only then drops what it submitted."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.prefix = f"memq:{namespace}:chat"
        self._drop = register(client, "workers", "chat_drop_taken")

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
