"""The Redis side of chat-platform messages: which events were seen, and each conversation's
buffer of events until it has been quiet long enough to be flushed as one job."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any

import redis

from pipeline.chat import ChatEvent
from workers.state_store import redis_errors

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
