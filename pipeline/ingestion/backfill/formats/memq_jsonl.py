"""The reader of memq's own JSON-lines format."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipeline.ingestion.backfill.readers import (
    Conversation,
    Message,
    Position,
    Reader,
    content_key,
    parse_timestamp,
    register,
    require,
)
from pipeline.ingestion.backfill.streams import (
    iter_lines,
    json_line,
)


@register
class MemqJsonlReader(Reader):
    """memq's own format: one JSON object per line, ``{"user_id", "agent_id"?, "timestamp",
    "messages": [{"role", "content", "name"?}], "metadata"?, "id"?}``. Blank lines are ignored;
    a bad line is reported (line number + reason) and skipped. Key: ``user_id/id``, or a hash
    of the line's content when it has no id. Position: the line's byte offset."""

    format = "memq-jsonl"

    def _located(self) -> Iterator[tuple[Position, Conversation]]:
        for number, offset, raw in iter_lines(self.path, self.options.opener):
            if not raw.strip():
                continue
            try:
                yield (offset,), self._parse(json_line(raw), f"line {number}")
            except ValueError as exc:
                self.report(f"{self.path.name} line {number}", str(exc))

    def load(self, position: Position) -> Conversation:
        (offset,) = position
        _, _, raw = next(iter_lines(self.path, self.options.opener, int(offset)))
        return self._parse(json_line(raw), f"byte {offset}")

    def _parse(self, item: Any, where: str) -> Conversation:
        messages = [_jsonl_message(m) for m in require(item, "messages", list)]
        if not messages:
            raise ValueError("'messages' is empty")
        user = self.user_for(item.get("user_id"), where)
        own_id = item.get("id")
        metadata = item.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise ValueError("'metadata' is not an object")
        return Conversation(
            key=f"{user}/{own_id}" if own_id not in (None, "") else content_key(item),
            user_id=user,
            agent_id=self.options.agent_id or item.get("agent_id"),
            timestamp=parse_timestamp(item.get("timestamp")),
            messages=messages,
            metadata={"source": self.format, **metadata},
        )


def _jsonl_message(item: Any) -> Message:
    role = require(item, "role", str)
    content = require(item, "content", str)
    message = {"role": role, "content": content}
    if isinstance(item.get("name"), str):
        message["name"] = item["name"]
    return message
