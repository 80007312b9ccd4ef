"""Turning a model's reply into data: lenient JSON repair, then the extraction reply's facts.

Models wrap JSON in fences or prose, leave trailing commas, or quote with ``'``. What can be
repaired without guessing is; anything else is a ``PermanentError`` carrying (a bounded copy
of) the raw reply, so the job record shows what the model actually said.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pipeline.errors import PermanentError

MAX_RAW_IN_ERROR_CHARS = 2_000
MAX_FACT_CHARS = 2_000
_MAX_OBJECT_STARTS = 20  # bounds the scan of a long prose reply for an embedded object

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_FACT_LISTS = ("memory", "facts")
_ATTRIBUTIONS: dict[str, Literal["user", "assistant"]] = {
    "user": "user",
    "assistant": "assistant",
    "agent": "assistant",  # a synonym models use under the agent-perspective prompt
}

Attribution = Literal["user", "assistant"]


class FactReply(BaseModel):
    """One fact as the model is asked to write it (the structured-outputs schema)."""

    model_config = ConfigDict(extra="forbid")

    text: str
    attributed_to: Literal["user", "assistant"]
    related: list[int]
    replaces: list[int]


class FactsReply(BaseModel):
    """The extraction reply the prompts describe: ``{"memory": [fact, ...]}``. Its JSON
    schema is what the model is asked for; the reply is still read by ``parse_facts``, which
    also accepts what JSON mode lets through (fences, ``facts``, missing fields)."""

    model_config = ConfigDict(extra="forbid")

    memory: list[FactReply]


@dataclass(frozen=True)
class FactOut:
    """One extracted fact. ``related`` and ``replaces`` hold positions (0-based) in the
    existing-memory list: the memories it builds on, and those it makes untrue."""

    text: str
    attributed_to: Attribution
    related: tuple[int, ...] = ()
    replaces: tuple[int, ...] = ()


@dataclass(frozen=True)
class ParsedFacts:
    """The facts of a reply, and the ``related`` ids it cited that were not shown to it."""

    facts: list[FactOut]
    unknown_ids: list[int]


def parse_json_object(raw: str) -> dict[str, Any]:
    """The JSON object in a model reply.

    Tries, in order: the whole reply, the contents of each ```` ``` ```` fence, then each
    balanced ``{...}`` found in the text (string- and escape-aware); each candidate as-is, then
    with trailing commas dropped and single-quoted strings turned into double-quoted ones.
    Raises ``PermanentError`` (with the raw reply, truncated) when no candidate is an object.
    """
    for candidate in _candidates(raw):
        parsed = _loads_object(candidate)
        if parsed is not None:
            return parsed
    raise PermanentError(f"LLM reply holds no JSON object: {excerpt(raw)}")


def parse_facts(raw: str, known_ids: int) -> ParsedFacts:
    """The facts of an extraction reply ``{"memory": [{"text", "attributed_to", "related",
    "replaces"}]}``.

    Also accepts ``"facts"`` as the list's key and plain strings as items. Empty texts are
    skipped, long ones truncated to ``MAX_FACT_CHARS``; ``attributed_to`` defaults to "user".
    ``related`` and ``replaces`` ids outside ``0..known_ids-1`` are dropped and returned in
    ``unknown_ids``.
    Raises ``PermanentError`` (with the raw reply) when there is no usable list.
    """
    items = _fact_items(parse_json_object(raw), raw)
    facts: list[FactOut] = []
    unknown: list[int] = []
    for item in items:
        fact = _fact(item, known_ids, unknown)
        if fact is not None:
            facts.append(fact)
    return ParsedFacts(facts=facts, unknown_ids=unknown)


def excerpt(raw: str, limit: int = MAX_RAW_IN_ERROR_CHARS) -> str:
    """``raw`` as a quoted string, cut to ``limit`` characters (marked when cut)."""
    if len(raw) <= limit:
        return repr(raw)
    return f"{raw[:limit]!r}... ({len(raw)} chars)"


def _fact_items(reply: dict[str, Any], raw: str) -> list[Any]:
    for key in _FACT_LISTS:
        items = reply.get(key)
        if isinstance(items, list):
            return items
    raise PermanentError(f"LLM reply has no 'memory' list: {excerpt(raw)}")


def _fact(item: Any, known_ids: int, unknown: list[int]) -> FactOut | None:
    """One item as a fact (None when it has no usable text); out-of-range ids go to unknown."""
    if isinstance(item, str):
        item = {"text": item}
    if not isinstance(item, dict) or not isinstance(item.get("text"), str):
        return None
    text = item["text"].strip()[:MAX_FACT_CHARS]
    if not text:
        return None
    return FactOut(
        text=text,
        attributed_to=_attribution(item.get("attributed_to")),
        related=_related(item.get("related"), known_ids, unknown),
        replaces=_related(item.get("replaces"), known_ids, unknown),
    )


def _attribution(value: Any) -> Attribution:
    if isinstance(value, str):
        return _ATTRIBUTIONS.get(value.strip().lower(), "user")
    return "user"


def _related(value: Any, known_ids: int, unknown: list[int]) -> tuple[int, ...]:
    """Valid, de-duplicated positions, in order. Non-integers are ignored, not reported."""
    if not isinstance(value, list):
        return ()
    kept: list[int] = []
    for entry in value:
        position = _as_int(entry)
        if position is None:
            continue
        if not 0 <= position < known_ids:
            unknown.append(position)
        elif position not in kept:
            kept.append(position)
    return tuple(kept)


def _as_int(value: Any) -> int | None:
    # bool is an int subclass; `true` is not a memory number.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,9}\s*", value):
        return int(value)
    return None


def _candidates(raw: str) -> Iterator[str]:
    yield raw.strip()
    for match in _FENCE.finditer(raw):
        yield match.group(1).strip()
    yield from _balanced_objects(raw)


def _loads_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object, repaired if needed; None when it is not one."""
    for attempt in (text, _repair(text)):
        try:
            parsed = json.loads(attempt)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return None


def _balanced_objects(text: str) -> Iterator[str]:
    """Each balanced ``{...}`` span, by start position, for the first few ``{`` of ``text``."""
    starts = [i for i, char in enumerate(text) if char == "{"][:_MAX_OBJECT_STARTS]
    for start in starts:
        end = _matching_brace(text, start)
        if end is not None:
            yield text[start : end + 1]


def _matching_brace(text: str, start: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``start``, ignoring braces inside strings."""
    scanner = _Scanner()
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if scanner.feed(char):
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return index
    return None


class _Scanner:
    """Tracks whether a character is inside a string literal ("..." or '...', with escapes)."""

    def __init__(self) -> None:
        self.quote: str | None = None
        self.escaped = False

    def feed(self, char: str) -> bool:
        """Consume ``char``; True when it belongs to a string literal (quotes included)."""
        if self.quote is None:
            if char in "\"'":
                self.quote = char
                return True
            return False
        if self.escaped:
            self.escaped = False
        elif char == "\\":
            self.escaped = True
        elif char == self.quote:
            self.quote = None
        return True


def _repair(text: str) -> str:
    """Drop trailing commas before ``}``/``]`` and rewrite '...' strings as "..." ones.

    Only characters outside string literals are touched, so text inside strings is safe.
    An apostrophe inside a single-quoted string still breaks it: that reply stays unparsed.
    """
    rewriter = _Rewriter()
    for char in text:
        rewriter.feed(char)
    return "".join(rewriter.out)


class _Rewriter:
    """One pass over a JSON-ish text, emitting strict JSON where the fix is unambiguous."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.quote: str | None = None
        self.escaped = False
        self.pending_comma: int | None = None  # index in ``out`` of a comma that may trail

    def feed(self, char: str) -> None:
        if self.quote is None:
            self._outside(char)
        elif self.escaped:
            self.escaped = False
            # JSON has no \' escape: inside a '...' string it is just an apostrophe.
            self.out.append("'" if char == "'" == self.quote else "\\" + char)
        elif char == "\\":
            self.escaped = True
        elif char == self.quote:
            self.quote = None
            self.out.append('"')
        else:
            self.out.append('\\"' if char == '"' else char)

    def _outside(self, char: str) -> None:
        if char in "}]" and self.pending_comma is not None:
            self.out[self.pending_comma] = ""
        if not char.isspace():
            self.pending_comma = len(self.out) if char == "," else None
        if char in "\"'":
            self.quote = char
            char = '"'
        self.out.append(char)
