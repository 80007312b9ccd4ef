"""The reader of Slack's export (a folder per channel, a file per day)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from pipeline.errors import InvalidInputError
from pipeline.ingestion.backfill.readers import (
    Conversation,
    Message,
    Position,
    Reader,
    register,
)
from pipeline.ingestion.backfill.streams import (
    json_line,
)

_DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.json$")
_KEPT_SUBTYPES = frozenset({"thread_broadcast", "file_share", "me_message"})


@register
class SlackReader(Reader):
    """A Slack export folder: ``channels.json`` (optional: when present, it lists the channels
    read) and one folder per channel holding one ``YYYY-MM-DD.json`` per day. One conversation
    per channel per day, thread replies folded in after their parent; user id: the channel name
    unless ``user_id`` is given; every message has role ``user`` and name = the person's name
    from ``users.json`` (display name, else real name, else handle), or the Slack user id when
    the export has no such entry. Messages with a subtype (joins, topics, bots) are left out,
    except thread_broadcast, file_share and me_message. Key and position: ``channel/day``."""

    format = "slack"

    @cached_property
    def names(self) -> dict[str, str]:
        """Slack user id → the name people know them by, from ``users.json`` (if any)."""
        items = self._index("users.json", "users")
        return {u["id"]: n for u in items if isinstance(u, dict) and (n := _slack_name(u))}

    def validate(self) -> None:
        if not self.path.is_dir():
            raise InvalidInputError(f"{self.path}: a Slack export is a folder", field="path")
        if not self.channels():
            raise InvalidInputError(
                f"{self.path}: not a Slack export (no channel folder with YYYY-MM-DD.json files)"
            )

    def channels(self) -> list[str]:
        """Channel folder names, in ``channels.json`` order when it exists, else sorted."""
        listed = self._listed_channels()
        folders = sorted(p.name for p in self.path.iterdir() if p.is_dir() and self._days(p.name))
        return [name for name in listed if name in folders] if listed else folders

    def _listed_channels(self) -> list[str]:
        items = self._index("channels.json", "channels")
        return [c["name"] for c in items if isinstance(c, dict) and isinstance(c.get("name"), str)]

    def _index(self, name: str, what: str) -> list[Any]:
        """The JSON array of the export's optional index file ``name`` ([] when absent);
        ``InvalidInputError`` when it is there but not a JSON array."""
        index = self.path / name
        if not index.is_file():
            return []
        try:
            items = json.loads(index.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidInputError(f"{index}: not JSON ({exc})") from exc
        if not isinstance(items, list):
            raise InvalidInputError(f"{index}: not a JSON array of {what}")
        return items

    def _days(self, channel: str) -> list[str]:
        folder = self.path / channel
        return sorted(p.name for p in folder.iterdir() if p.is_file() and _DAY_FILE.match(p.name))

    def _located(self) -> Iterator[tuple[Position, Conversation]]:
        for channel in self.channels():
            for day in self._days(channel):
                try:
                    yield (channel, day), self.load((channel, day))
                except ValueError as exc:
                    self.report(f"{channel}/{day}", str(exc))

    def load(self, position: Position) -> Conversation:
        channel, day = str(position[0]), str(position[1])
        with self.options.opener(self.path / channel / day) as stream:
            items = json_line(stream.read())
        if not isinstance(items, list):
            raise ValueError("not a JSON array of messages")
        kept = sorted((_slack_order(m), m) for m in items if _slack_kept(m))
        if not kept:
            raise ValueError("no message with text")
        return Conversation(
            key=f"{channel}/{day.removesuffix('.json')}",
            user_id=self.user_for(channel, f"{channel}/{day}"),
            agent_id=self.options.agent_id,
            timestamp=datetime.fromtimestamp(kept[0][0][1], UTC),
            messages=[_slack_message(m, self.names) for _, m in kept],
            metadata={"source": self.format, "channel": channel, "day": day[:10]},
        )


def _slack_kept(item: Any) -> bool:
    if not isinstance(item, dict) or not isinstance(item.get("text"), str):
        return False
    if item.get("subtype") is not None and item.get("subtype") not in _KEPT_SUBTYPES:
        return False
    return bool(item["text"].strip()) and _slack_ts(item.get("ts")) is not None


def _slack_ts(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _slack_order(item: dict[str, Any]) -> tuple[float, float]:
    """Threads folded in: a reply sorts right after its parent (by the thread's start)."""
    ts = _slack_ts(item["ts"]) or 0.0
    root = _slack_ts(item.get("thread_ts"))
    return (root if root is not None else ts, ts)


def _slack_message(item: dict[str, Any], names: dict[str, str]) -> Message:
    message = {"role": "user", "content": item["text"]}
    if isinstance(item.get("user"), str) and item["user"]:
        message["name"] = names.get(item["user"], item["user"])
    return message


def _slack_name(user: dict[str, Any]) -> str | None:
    """A users.json entry's name: display name, else real name, else handle (None: no id)."""
    if not isinstance(user.get("id"), str):
        return None
    profile = user.get("profile")
    profile = profile if isinstance(profile, dict) else {}
    for value in (
        profile.get("display_name"),
        profile.get("real_name"),
        user.get("real_name"),
        user.get("name"),
    ):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None
