"""Readers of transcript archives: one class per format behind one interface, no Celery.

A reader streams an archive as ``Conversation`` items. Every reader offers two passes:

- ``scan()`` streams the whole archive and yields one small ``Located`` record per conversation
  (its key, user, time, message count and where it lives), so a caller can order sessions
  oldest first while holding O(number of conversations) small records, never the archive;
- ``load(position)`` reads one conversation back from where ``scan`` found it (a byte offset,
  or a file name), without re-reading the rest.

An archive may also be a ``.zip`` of the same files (ChatGPT and Slack export as zip): it is
read in place, member by member, never unpacked to disk; a zip whose files sit in one folder is
read from that folder.

Items that cannot be read (a bad JSONL line, a conversation without messages) are reported in
``reader.problems`` (where + why) and skipped. An archive that is not of the reader's format
raises ``InvalidInputError`` naming the file and what is wrong. A new format is one ``Reader``
subclass decorated with ``@register``, in a module of ``pipeline.ingestion.backfill.formats``; the
byte streams they read are ``pipeline.ingestion.backfill.streams``.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from pipeline.errors import InvalidInputError
from pipeline.ingestion.backfill.streams import (
    CHUNK_SIZE,
    ArchivePath,
    Opener,
    archive_root,
    open_binary,
)

Position = tuple[str | int, ...]
Message = dict[str, str]


@dataclass(frozen=True)
class Conversation:
    """One conversation of an archive. ``key`` is stable across runs over the same archive;
    ``timestamp`` (aware) is when it happened and becomes the observation time."""

    key: str
    user_id: str
    timestamp: datetime
    messages: list[Message]
    agent_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Located:
    """What the ordering pass keeps of one conversation: small, whatever its size."""

    key: str
    user_id: str
    timestamp: datetime
    message_count: int
    position: Position


@dataclass(frozen=True)
class Problem:
    """An item skipped: where it is (file and line, offset or key) and why."""

    where: str
    reason: str


@dataclass(frozen=True)
class ReaderOptions:
    """Caller choices: ``user_id``/``agent_id`` given here win over the archive's own."""

    user_id: str | None = None
    agent_id: str | None = None
    chunk_size: int = CHUNK_SIZE
    opener: Opener = open_binary


class Reader(ABC):
    """The interface every format implements (see the module docstring)."""

    format: ClassVar[str]

    def __init__(self, path: ArchivePath, options: ReaderOptions | None = None) -> None:
        self.path = path
        self.options = options or ReaderOptions()
        self.problems: list[Problem] = []
        self.validate()

    def validate(self) -> None:
        """Raise ``InvalidInputError`` when ``path`` cannot be this format (cheap checks)."""
        if not self.path.is_file():
            raise InvalidInputError(f"{self.path}: no such file", field="path")

    @abstractmethod
    def _located(self) -> Iterator[tuple[Position, Conversation]]:
        """Every readable conversation with its position, in archive order."""

    @abstractmethod
    def load(self, position: Position) -> Conversation:
        """The conversation ``scan`` found at ``position``."""

    def read(self) -> Iterator[Conversation]:
        """Every readable conversation, streamed in archive order."""
        for _, conversation in self._checked():
            yield conversation

    def scan(self) -> Iterator[Located]:
        """One small record per readable conversation, streamed in archive order."""
        for position, c in self._checked():
            yield Located(c.key, c.user_id, c.timestamp, len(c.messages), position)

    def _checked(self) -> Iterator[tuple[Position, Conversation]]:
        found = False
        for item in self._located():
            found = True
            yield item
        if not found and self.problems:
            first = self.problems[0]
            raise InvalidInputError(
                f"{self.path}: no {self.format} conversation found "
                f"({len(self.problems)} bad item(s); first at {first.where}: {first.reason})",
                field="path",
            )

    def report(self, where: str, reason: str) -> None:
        self.problems.append(Problem(where, reason))

    def user_for(self, own: str | None, where: str) -> str:
        """The option's user id, else the archive's; neither is bad input."""
        user = self.options.user_id or own
        if not user:
            raise ValueError(f"no user id at {where} (pass --user-id)")
        return user


READERS: dict[str, type[Reader]] = {}


def register(cls: type[Reader]) -> type[Reader]:
    READERS[cls.format] = cls
    return cls


def reader_for(fmt: str, path: Path, options: ReaderOptions | None = None) -> Reader:
    """The reader of format ``fmt`` over ``path`` (validated). Unknown format: InvalidInputError."""
    if fmt not in READERS:
        known = ", ".join(sorted(READERS))
        raise InvalidInputError(f"unknown format {fmt!r} (known: {known})", field="format")
    return READERS[fmt](archive_root(path), options)


# -- shared parsing -----------------------------------------------------------------------------


def parse_timestamp(value: Any) -> datetime:
    """ISO 8601 (naive means UTC) or Unix seconds, as an aware datetime. ValueError otherwise."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"timestamp {value!r} is not a date")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), UTC)
    if not isinstance(value, str):
        raise ValueError(f"timestamp {value!r} is not a date")
    parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def content_key(value: Any) -> str:
    """A stable key from content, for items without an id of their own."""
    payload = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return "sha1-" + hashlib.sha1(payload.encode(), usedforsecurity=False).hexdigest()[:20]


def require(mapping: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    """``mapping[name]`` when it has type ``kind``; ValueError naming the field otherwise."""
    if not isinstance(mapping, dict):
        raise ValueError("not a JSON object")
    value = mapping.get(name)
    if not isinstance(value, kind):
        raise ValueError(f"'{name}' is missing or not a {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)
