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
subclass decorated with ``@register``.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
import zipfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import IO, Any, ClassVar

from pipeline.errors import InvalidInputError

Position = tuple[str | int, ...]
Message = dict[str, str]
ArchivePath = Path | zipfile.Path
Opener = Callable[[ArchivePath], IO[bytes]]

CHUNK_SIZE = 1 << 20
MAX_ELEMENT_CHARS = 64 << 20  # one conversation larger than this is taken as a malformed file
_WS = " \t\r\n"


def open_binary(path: ArchivePath) -> IO[bytes]:
    return path.open("rb")


def archive_root(path: Path) -> ArchivePath:
    """``path`` itself, or, for a zip file, the folder (or the one file) inside it to read."""
    if not (path.is_file() and zipfile.is_zipfile(path)):
        return path
    root: ArchivePath = zipfile.Path(zipfile.ZipFile(path))
    entries: list[ArchivePath] = list(root.iterdir())
    while len(entries) == 1:  # one folder (or one file) wrapping everything
        root = entries[0]
        if not root.is_dir():
            break
        entries = list(root.iterdir())
    return root


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


def first_char(path: ArchivePath, opener: Opener) -> str:
    """The first non-blank character of a file ('' when it is blank)."""
    with opener(path) as stream:
        head = stream.read(4096).decode("utf-8-sig", errors="replace")
    return head.lstrip(_WS)[:1]


class JsonArrayStream:
    """Streams the elements of a top-level JSON array read from a binary stream, in chunks:
    memory holds one element (and one chunk), never the array. Yields ``(byte_offset, value)``
    where ``byte_offset`` is where the element starts, for ``load_json_at``.

    Raises ``InvalidInputError`` naming ``name`` when the stream is not a JSON array or an element
    is malformed (or larger than ``MAX_ELEMENT_CHARS``)."""

    def __init__(self, stream: IO[bytes], name: str, chunk_size: int = CHUNK_SIZE) -> None:
        self.stream = stream
        self.name = name
        self.chunk_size = chunk_size
        self.decoder = json.JSONDecoder()
        self.utf8 = codecs.getincrementaldecoder("utf-8-sig")()
        self.buffer = ""
        self.base = 0  # byte offset of buffer[0]
        self.eof = False

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        self._expect("[", "the file is not a JSON array")
        if self._peek() == "]":
            return
        while True:
            yield self._element()
            if self._expect(",]", "expected ',' or ']' after an element") == "]":
                return

    def _fill(self, size: int) -> bool:
        if self.eof:
            return False
        chunk = self.stream.read(size)
        self.eof = not chunk
        self.buffer += self.utf8.decode(chunk, final=self.eof)
        return not self.eof

    def _consume(self, count: int) -> None:
        self.base += len(self.buffer[:count].encode())
        self.buffer = self.buffer[count:]

    def _peek(self) -> str:
        while True:
            stripped = self.buffer.lstrip(_WS)
            self._consume(len(self.buffer) - len(stripped))
            if self.buffer or not self._fill(self.chunk_size):
                return self.buffer[:1]

    def _expect(self, allowed: str, what: str) -> str:
        char = self._peek()
        if not char or char not in allowed:
            found = repr(char) if char else "end of file"
            raise InvalidInputError(f"{self.name}: {what} (found {found} at byte {self.base})")
        self._consume(1)
        return char

    def _element(self) -> tuple[int, Any]:
        self._peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buffer)
            except json.JSONDecodeError as exc:
                self._grow(exc)
                continue
            offset = self.base
            self._consume(end)
            return offset, value

    def _grow(self, exc: json.JSONDecodeError) -> None:
        """An element that does not decode yet: read more (doubling, so one large element costs
        linear time), or fail at end of file or past the size bound."""
        if len(self.buffer) > MAX_ELEMENT_CHARS:
            raise InvalidInputError(
                f"{self.name}: element at byte {self.base} is malformed or larger than "
                f"{MAX_ELEMENT_CHARS} characters"
            ) from exc
        if not self._fill(max(self.chunk_size, len(self.buffer))):
            raise InvalidInputError(
                f"{self.name}: malformed JSON in the element at byte {self.base}: {exc.msg}"
            ) from exc


def load_json_at(
    path: ArchivePath, offset: int, opener: Opener, chunk_size: int = CHUNK_SIZE
) -> Any:
    """The one JSON value starting at byte ``offset`` of ``path`` (read in chunks)."""
    with opener(path) as stream:
        stream.seek(offset)
        decoder = json.JSONDecoder()
        utf8 = codecs.getincrementaldecoder("utf-8")()
        text = ""
        while True:
            chunk = stream.read(max(chunk_size, len(text)))
            text += utf8.decode(chunk, final=not chunk)
            try:
                return decoder.raw_decode(text)[0]
            except json.JSONDecodeError as exc:
                if not chunk:
                    raise InvalidInputError(f"{path}: no JSON value at byte {offset}") from exc


def iter_lines(
    path: ArchivePath, opener: Opener, start: int = 0
) -> Iterator[tuple[int, int, bytes]]:
    """``(line_number, byte_offset, raw_line)`` from ``start``, streamed; line numbers count
    from 1 at ``start``."""
    with opener(path) as stream:
        stream.seek(start)
        offset = start
        for number, raw in enumerate(stream, start=1):
            yield number, offset, raw
            offset += len(raw)


def json_line(raw: bytes) -> Any:
    """The JSON value of one line. ValueError (with the reason) when it is not JSON."""
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ValueError("not UTF-8") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} at column {exc.colno}") from exc


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


# -- memq-jsonl ---------------------------------------------------------------------------------


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


# -- chatgpt ------------------------------------------------------------------------------------


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


# -- slack --------------------------------------------------------------------------------------

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


# -- locomo -------------------------------------------------------------------------------------

_LOCOMO_DATE = "%I:%M %p on %d %B, %Y"
_SESSION = re.compile(r"^session_(\d+)$")


@register
class LocomoReader(Reader):
    """LoCoMo, in either layout (told apart by the first character of the file):

    - ``locomo10.json``: a JSON array of samples ``{"sample_id", "conversation": {"speaker_a",
      "speaker_b", "session_N": [{"speaker", "dia_id", "text"}], "session_N_date_time"}}``,
      streamed sample by sample; one conversation per session, its time parsed from
      ``"1:56 pm on 8 May, 2023"``. Position: (sample byte offset, session name).
    - ``turns.jsonl``: one turn per line ``{"conv_id", "session_id", "session_datetime_iso",
      "speaker", "text", "dia_id", "blip_caption"?}``, streamed and grouped per (conv_id,
      session_id); a session's turns must be contiguous. Position: the group's first byte.

    A folder holding either file works too. Content is ``"Speaker: text"`` (a shared photo's
    caption appended), name = the speaker; user id: the conversation id unless given."""

    format = "locomo"
    layout: str | None

    def __init__(self, path: ArchivePath, options: ReaderOptions | None = None) -> None:
        if path.is_dir():
            found = [p for p in (path / "locomo10.json", path / "turns.jsonl") if p.is_file()]
            path = found[0] if found else path / "turns.jsonl"
        super().__init__(path, options)

    def validate(self) -> None:
        super().validate()
        self.layout = {"[": "samples", "{": "turns"}.get(first_char(self.path, self.options.opener))
        if self.layout is None:
            raise InvalidInputError(
                f"{self.path}: not LoCoMo (neither a JSON array of samples nor JSON lines of turns)"
            )

    def _located(self) -> Iterator[tuple[Position, Conversation]]:
        if self.layout == "samples":
            return self._samples()
        return self._turn_groups()

    def load(self, position: Position) -> Conversation:
        if self.layout == "samples":
            offset, session = position
            item = load_json_at(self.path, int(offset), self.options.opener)
            return self._session(item, str(session))
        return self._group_at(int(position[0]))

    # locomo10.json

    def _samples(self) -> Iterator[tuple[Position, Conversation]]:
        with self.options.opener(self.path) as stream:
            for offset, item in JsonArrayStream(stream, str(self.path), self.options.chunk_size):
                for session in _session_names(item):
                    try:
                        yield (offset, session), self._session(item, session)
                    except ValueError as exc:
                        self.report(f"{_sample_id(item)}/{session}", str(exc))
                if not _session_names(item):
                    self.report(f"byte {offset}", "not a LoCoMo sample (no conversation sessions)")

    def _session(self, item: Any, session: str) -> Conversation:
        sample = str(require(item, "sample_id", (str, int)))
        dialogue = require(item, "conversation", dict)
        turns = require(dialogue, session, list)
        when = datetime.strptime(require(dialogue, f"{session}_date_time", str), _LOCOMO_DATE)
        return self._conversation(sample, session, when.replace(tzinfo=UTC), turns)

    # turns.jsonl

    def _turn_groups(self) -> Iterator[tuple[Position, Conversation]]:
        finished: set[tuple[str, str]] = set()
        for offset, group in self._groups(0, stop_after_one=False):
            try:
                ids = _group_ids(group)
                if ids in finished:
                    raise ValueError("its turns are not contiguous in the file")
                finished.add(ids)
                yield (offset,), self._turns_conversation(group)
            except ValueError as exc:
                self.report(f"{self.path.name} byte {offset}", str(exc))

    def _group_at(self, offset: int) -> Conversation:
        for _, group in self._groups(offset, stop_after_one=True):
            return self._turns_conversation(group)
        raise InvalidInputError(f"{self.path}: no turns at byte {offset}")

    def _groups(self, start: int, stop_after_one: bool) -> Iterator[tuple[int, list[Any]]]:
        """Consecutive turns of one (conv_id, session_id), with the byte offset of the first;
        a line that is not a turn is reported and ends no group."""
        group: list[Any] = []
        first = start
        for number, offset, raw in iter_lines(self.path, self.options.opener, start):
            turn = self._turn(raw, number, offset)
            if turn is None:
                continue
            if group and _group_ids(group) != _group_ids([turn]):
                yield first, group
                if stop_after_one:
                    return
                group = []
            if not group:
                first = offset
            group.append(turn)
        if group:
            yield first, group

    def _turn(self, raw: bytes, number: int, offset: int) -> dict[str, Any] | None:
        if not raw.strip():
            return None
        try:
            turn = json_line(raw)
            for name in ("conv_id", "session_id", "speaker", "text"):
                require(turn, name, str)
            return dict(turn)
        except ValueError as exc:
            self.report(f"{self.path.name} line {number} (byte {offset})", str(exc))
            return None

    def _turns_conversation(self, group: list[dict[str, Any]]) -> Conversation:
        conv_id, session = _group_ids(group)
        first = group[0]
        stamp = first.get("session_datetime_iso")
        if isinstance(stamp, str):
            when = parse_timestamp(stamp)
        else:
            raw_date = require(first, "session_datetime", str)
            when = datetime.strptime(raw_date, _LOCOMO_DATE).replace(tzinfo=UTC)
        return self._conversation(conv_id, session, when, group)

    # both layouts

    def _conversation(
        self, conv_id: str, session: str, when: datetime, turns: list[Any]
    ) -> Conversation:
        messages = [_locomo_message(t) for t in turns]
        if not messages:
            raise ValueError("the session has no turns")
        return Conversation(
            key=f"{conv_id}/{session}",
            user_id=self.user_for(conv_id, f"{conv_id}/{session}"),
            agent_id=self.options.agent_id,
            timestamp=when,
            messages=messages,
            metadata={"source": self.format, "conv_id": conv_id, "session": session},
        )


def _session_names(item: Any) -> list[str]:
    dialogue = item.get("conversation") if isinstance(item, dict) else None
    if not isinstance(dialogue, dict):
        return []
    names = [k for k in dialogue if _SESSION.match(k)]
    return sorted(names, key=lambda name: int(name.split("_")[1]))


def _sample_id(item: Any) -> str:
    return str(item.get("sample_id", "?")) if isinstance(item, dict) else "?"


def _group_ids(group: list[dict[str, Any]]) -> tuple[str, str]:
    return str(group[0]["conv_id"]), str(group[0]["session_id"])


def _locomo_message(turn: Any) -> Message:
    speaker = require(turn, "speaker", str)
    text = require(turn, "text", str)
    caption = turn.get("blip_caption")
    if isinstance(caption, str) and caption:
        text = f"{text} [shares a photo: {caption}]"
    return {"role": "user", "content": f"{speaker}: {text}", "name": speaker}
