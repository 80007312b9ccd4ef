"""The reader of the LoCoMo benchmark's conversations."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pipeline.errors import InvalidInputError
from pipeline.ingestion.backfill.readers import (
    Conversation,
    Message,
    Position,
    Reader,
    ReaderOptions,
    parse_timestamp,
    register,
    require,
)
from pipeline.ingestion.backfill.streams import (
    ArchivePath,
    JsonArrayStream,
    first_char,
    iter_lines,
    json_line,
    load_json_at,
)

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
