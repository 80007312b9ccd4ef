"""The reader of ChatGPT's export (conversations.json)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipeline.errors import InvalidInputError
from pipeline.ingestion.backfill.readers import (
    Conversation,
    Message,
    Position,
    Reader,
    ReaderOptions,
    content_key,
    parse_timestamp,
    register,
    require,
)
from pipeline.ingestion.backfill.streams import (
    ArchivePath,
    JsonArrayStream,
    first_char,
    load_json_at,
)


@register
class ChatGPTReader(Reader):
    """A ChatGPT export's ``conversations.json`` (a file, or a folder holding it), streamed
    element by element (``JsonArrayStream``): memory is bounded by the largest conversation.
    The active thread is the path from ``current_node`` back to the root; system and tool
    messages and empty ones are left out. Needs ``user_id`` (the export names nobody). Key: the
    conversation's ``id`` (or ``conversation_id``), else a hash of title and create_time.
    Position: the byte offset of the conversation in the array."""

    format = "chatgpt"

    def __init__(self, path: ArchivePath, options: ReaderOptions | None = None) -> None:
        path = path / "conversations.json" if path.is_dir() else path
        super().__init__(path, options)

    def validate(self) -> None:
        super().validate()
        if not self.options.user_id:
            raise InvalidInputError("format chatgpt needs --user-id", field="user_id")
        if first_char(self.path, self.options.opener) != "[":
            raise InvalidInputError(f"{self.path}: not a ChatGPT export (not a JSON array)")

    def _located(self) -> Iterator[tuple[Position, Conversation]]:
        with self.options.opener(self.path) as stream:
            elements = JsonArrayStream(stream, str(self.path), self.options.chunk_size)
            for index, (offset, item) in enumerate(elements):
                try:
                    yield (offset,), self._parse(item)
                except ValueError as exc:
                    self.report(f"{self.path.name} conversation {index} (byte {offset})", str(exc))

    def load(self, position: Position) -> Conversation:
        (offset,) = position
        opener, size = self.options.opener, self.options.chunk_size
        return self._parse(load_json_at(self.path, int(offset), opener, size))

    def _parse(self, item: Any) -> Conversation:
        mapping = require(item, "mapping", dict)
        messages = [m for m in map(_chatgpt_message, active_thread(mapping, item)) if m]
        if not messages:
            raise ValueError("no user or assistant text in the active thread")
        own_id = item.get("id") or item.get("conversation_id")
        title = item.get("title") if isinstance(item.get("title"), str) else ""
        stamp = item.get("create_time") or item.get("update_time")
        return Conversation(
            key=str(own_id) if own_id else content_key([title, stamp]),
            user_id=self.user_for(None, "chatgpt"),
            agent_id=self.options.agent_id,
            timestamp=parse_timestamp(stamp),
            messages=messages,
            metadata={"source": self.format, "title": title},
        )


def active_thread(mapping: dict[str, Any], item: dict[str, Any]) -> list[Any]:
    """The nodes from the root to ``current_node`` (the thread the user last saw), in order."""
    node_id = item.get("current_node")
    if node_id is None:  # older exports: follow the last child from the root
        return _last_children(mapping)
    path: list[Any] = []
    seen: set[str] = set()
    while node_id is not None:
        if node_id in seen or node_id not in mapping:
            raise ValueError(f"broken thread at node {node_id!r}")
        seen.add(node_id)
        path.append(mapping[node_id])
        node_id = mapping[node_id].get("parent") if isinstance(mapping[node_id], dict) else None
    return path[::-1]


def _last_children(mapping: dict[str, Any]) -> list[Any]:
    roots = [n for n in mapping.values() if isinstance(n, dict) and n.get("parent") is None]
    path: list[Any] = []
    node = roots[0] if roots else None
    while isinstance(node, dict) and len(path) <= len(mapping):
        path.append(node)
        children = node.get("children") or []
        node = mapping.get(children[-1]) if children else None
    return path


def _chatgpt_message(node: Any) -> Message | None:
    message = node.get("message") if isinstance(node, dict) else None
    if not isinstance(message, dict):
        return None
    role = (message.get("author") or {}).get("role")
    content = message.get("content") or {}
    if role not in ("user", "assistant") or not isinstance(content, dict):
        return None
    if content.get("content_type") not in ("text", "multimodal_text"):
        return None
    parts = content.get("parts") or []
    text = "\n".join(p for p in parts if isinstance(p, str)).strip()
    return {"role": role, "content": text} if text else None
