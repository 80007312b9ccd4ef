"""Deterministic, model-free entity extraction: proper-noun spans, acronyms and absolute dates.

The rules favour precision on chat text: a capitalised word is a name unless it is a common
word that English capitalises for other reasons (sentence starts, greetings, pronouns, the
calendar). Relative dates ("last Friday", "yesterday") are not entities: they only mean
something next to the session date, which the pipeline resolves elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from enum import Enum
from functools import lru_cache
from typing import NamedTuple

from pipeline.domain.protocols import Entity

NAME = "name"
ACRONYM = "acronym"
DATE = "date"
MAX_SPAN_WORDS = 6


def _word_set(words: str) -> frozenset[str]:
    """The whitespace-separated words of a literal: keeps the word lists below readable."""
    return frozenset(words.split())


# Never an entity on their own, wherever they are capitalised; they also split spans
# ("Hey Caroline" -> "Caroline"). Weekdays and months only count inside an absolute date.
_NEVER_NAMES = _word_set(
    """
    i me my mine myself you your yours yourself yourselves he him his himself she her hers
    herself it its itself we us our ours ourselves they them their theirs themselves
    a an the this that these those some any each every no all both either neither another
    what which who whom whose whatever whoever
    hey hi hello hiya howdy yo bye goodbye thanks thank thx ty yeah yes yep yup yea nope nah
    ok okay oh ah aw aww awww wow whoa haha hahaha lol lmao omg hmm um uh ooh yay ugh oops
    congrats congratulations cheers welcome please sorry dear hooray btw idk imo tbh
    mr mrs ms miss dr prof sir madam
    monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs
    fri sat sun january february march april may june july august september october november
    december feb mar apr jun jul aug sep sept oct nov dec
    today tomorrow yesterday tonight weekend morning afternoon evening night
    """
)

# Common words that are capitalised only because they open a sentence ("Good to see you!").
# They are dropped at the start of a sentence; mid-sentence capitals ("Good Will Hunting") stay.
_SENTENCE_STARTERS = _word_set(
    """
    and but or nor so because if unless when whenever while where why how then than also
    just maybe perhaps actually really definitely totally absolutely honestly anyway anyways
    still even only though although however besides meanwhile otherwise instead
    after before since until as at by for from in into on of off out over to up down with
    without about around during through like not now here there always never sometimes often
    usually once again almost already soon last next first second finally recently lately
    plus speaking talking glad happy great good nice cool awesome amazing wonderful fantastic
    beautiful lovely sweet funny interesting sounds sound love loved hope hoping think thought
    guess know knew feel felt let lets can could will would shall should might must do does
    did is are was were be been am have has had got get go went going make made take took see
    saw look looks looking check tell told say said keep try tried remember imagine wish
    anything something nothing everything anyone someone everyone nobody somebody everybody
    many much more most few lots lot very too sure true right exactly indeed agreed same
    kind being having doing new old big little long best better whoa well wait yes
    family life people art music dance care lost mental kids friends friend work school home
    time things thing stuff books book photos photo pictures picture pets dogs cats animals
    food fun hard tough enjoy enjoyed appreciate challenges bless every other such let's
    gotta gonna wanna lemme gimme kinda sorta woah oof ya missed started makes show super way
    cute lucky bet hang create respect success believe proud understand come ha gotcha back
    """
)
# Sentence-initial gerunds and adverbs ("Playing it helps", "Thankfully, ...") are almost never
# names, and no short list can hold them all; the length floors spare "King", "Emily", "Sally".
_GERUND_MIN_LENGTH = 6
_ADVERB_SUFFIXES = ("ally", "fully", "ately", "ently", "antly", "ously", "ively", "ckily", "pily")
_ADVERB_MIN_LENGTH = 7
# Endings no common given name has ("Mostly", "Lastly", "Mainly", "Partly", "Exactly"), so
# they need no more than six letters; "-ly" alone would take "Emily", "Kelly" and "Carly".
_SHORT_ADVERB_SUFFIXES = ("stly", "rtly", "ctly", "inly", "ghtly")
_SHORT_ADVERB_MIN_LENGTH = 6

# Lower-case words allowed between two capitalised words ("Bank of America", "Johnson & Johnson").
_CONNECTOR_WORDS = _word_set("of the de la del da di du van von der den le y &")
_CONNECTOR_PHRASES = _CONNECTOR_WORDS - {"the"} | {
    "of the",
    "de la",
    "van der",
    "van den",
    "von der",
}

# Letters, with inner hyphens and apostrophes ("Jean-Luc", "O'Brien", "Nature's"), or "&".
_WORD_RE = re.compile(r"[^\W\d_]+(?:[-'\u2019][^\W\d_]+)*['\u2019]?|&")
_CONTRACTION_TAILS = frozenset(["m", "re", "ve", "ll", "d", "t", "all"])
_SENTENCE_END_RE = re.compile(r"[.!?\n\u2026:\"\u201c]")
_SPAN_BREAK_RE = re.compile(r"\S|\n")

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b\.?"
)
_WEEKDAY = r"(?:(?:mon|tues|wednes|thurs|fri|satur|sun)day,?\s+)?"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_YEAR = r"\d{4}(?!\d)"
_DATE_RE = re.compile(
    r"(?<![\w-])(?:"
    r"\d{4}-\d{2}-\d{2}(?!\d)"
    rf"|{_WEEKDAY}{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}"
    rf"|{_WEEKDAY}{_MONTH}\s+{_DAY},?\s+{_YEAR}"
    rf"|{_MONTH},?\s+{_YEAR}"
    r")",
    re.IGNORECASE,
)


class _Kind(Enum):
    NAME = "name"
    ACRONYM = "acronym"
    CONNECTOR = "connector"
    OTHER = "other"


class _WordInfo(NamedTuple):
    kind: _Kind
    length: int  # of the part that belongs to the entity: "Nature's" -> 6
    closes: bool  # a possessive ends the span after itself
    starter: bool  # dropped when it opens a sentence


class _Token(NamedTuple):
    start: int
    end: int
    kind: _Kind
    closes: bool
    word: str  # as matched, to check connector phrases


class RuleEntityExtractor:
    """``EntityExtractor`` from capitalisation and date patterns; no model, no I/O, thread-safe.

    For each text, in order, returns its entities in first-seen order, deduplicated
    case-insensitively: capitalised spans of at most six words (``"name"``), standalone
    all-caps acronyms (``"acronym"``) and absolute dates with a year or ISO dates (``"date"``).
    ``Entity.text`` is the span as written, less a possessive "'s". Never raises.
    """

    def extract(self, texts: Sequence[str]) -> list[list[Entity]]:
        return [extract_entities(text) for text in texts]


def extract_entities(text: str) -> list[Entity]:
    """The entities of one text, as ``RuleEntityExtractor.extract`` describes."""
    dates = [(m.start(), Entity(m.group(), DATE)) for m in _DATE_RE.finditer(text)]
    masked = _mask(text, dates)
    names = [(span[0].start, _span_entity(text, span)) for span in _name_spans(masked)]
    return _dedupe(sorted(dates + names, key=lambda found: found[0]))


def _mask(text: str, dates: list[tuple[int, Entity]]) -> str:
    """``text`` with each date replaced by commas of the same length: offsets stay valid and
    the month of a date can no longer be read as a name or glue two names together."""
    for start, entity in dates:
        end = start + len(entity.text)
        text = text[:start] + "," * (end - start) + text[end:]
    return text


def _dedupe(found: list[tuple[int, Entity]]) -> list[Entity]:
    """The entities of ``found`` (sorted by offset), first occurrence of each casefolded text."""
    seen: set[str] = set()
    unique: list[Entity] = []
    for _, entity in found:
        key = entity.text.casefold()
        if key not in seen:
            seen.add(key)
            unique.append(entity)
    return unique


def _span_entity(text: str, span: list[_Token]) -> Entity:
    kind = ACRONYM if len(span) == 1 and span[0].kind is _Kind.ACRONYM else NAME
    return Entity(text[span[0].start : span[-1].end], kind)


def _name_spans(text: str) -> Iterator[list[_Token]]:
    """Runs of capitalised tokens separated only by spaces or allowed connectors."""
    builder = _SpanBuilder()
    for token, breaks in _tokens(text):
        if breaks:
            yield from builder.close()
        yield from builder.feed(token)
    yield from builder.close()


def _tokens(text: str) -> Iterator[tuple[_Token, bool]]:
    """Each word of ``text`` and whether anything but spaces separates it from the previous.

    Capitalised common words that open a sentence are turned into ``OTHER`` so that
    "Good Morning Caroline!" yields "Caroline" while "Caroline went home." keeps "Caroline".
    """
    previous_end = 0
    opening = True
    for match in _WORD_RE.finditer(text):
        gap = text[previous_end : match.start()]
        opening = opening or previous_end == 0 or bool(_SENTENCE_END_RE.search(gap))
        info = _word_info(match.group())
        kind = info.kind
        if opening and info.starter:
            kind = _Kind.OTHER
        else:
            opening = False
        end = match.start() + info.length
        token = _Token(match.start(), end, kind, info.closes, match.group())
        yield token, bool(_SPAN_BREAK_RE.search(gap))
        previous_end = match.end()


@lru_cache(maxsize=65_536)
def _word_info(word: str) -> _WordInfo:
    """How one word can take part in a name; cached because chat reuses a small vocabulary."""
    surface, closes = _strip_possessive(word)
    if surface is None:
        return _WordInfo(_Kind.OTHER, len(word), False, False)
    lower = surface.lower()
    starter = surface[:1].isupper() and _is_common_word(lower)
    return _WordInfo(_classify(surface, lower), len(surface), closes, starter)


def _is_common_word(lower: str) -> bool:
    """Whether a capitalised ``lower`` at a sentence start is more likely a word than a name."""
    if lower in _SENTENCE_STARTERS or lower in _NEVER_NAMES:
        return True
    if len(lower) >= _GERUND_MIN_LENGTH and lower.endswith("ing"):
        return True
    if len(lower) >= _SHORT_ADVERB_MIN_LENGTH and lower.endswith(_SHORT_ADVERB_SUFFIXES):
        return True
    return len(lower) >= _ADVERB_MIN_LENGTH and lower.endswith(_ADVERB_SUFFIXES)


def _strip_possessive(word: str) -> tuple[str | None, bool]:
    """``(surface, is_possessive)``; surface is None for a contraction such as "I'm" or "Don't"."""
    normalized = word.replace("\u2019", "'")
    if "'" not in normalized:
        return word, False
    head, _, tail = normalized.rpartition("'")
    if tail.lower() in ("s", ""):
        return word[: len(head)], True
    if tail.lower() in _CONTRACTION_TAILS:
        return None, False
    return word, False


def _classify(surface: str, lower: str) -> _Kind:
    """The role of a word wherever it stands; sentence position is handled by ``_tokens``."""
    if surface in _CONNECTOR_WORDS:
        return _Kind.CONNECTOR
    if len(surface) < 2 or lower in _NEVER_NAMES:
        return _Kind.OTHER
    if surface.isupper():
        return _Kind.ACRONYM
    if surface[0].isupper() or _is_camel_case(surface):
        return _Kind.NAME
    return _Kind.OTHER


def _is_camel_case(word: str) -> bool:
    """A brand such as "iPhone" or "eBay": lower-case start, upper-case letter after it."""
    return word[0].islower() and any(char.isupper() for char in word[1:])


class _SpanBuilder:
    """Accumulates one span; connectors are held back until a capitalised word follows them."""

    def __init__(self) -> None:
        self._span: list[_Token] = []
        self._connectors: list[_Token] = []

    def feed(self, token: _Token) -> Iterator[list[_Token]]:
        """Add ``token``; yields the spans it completes (at most two)."""
        if token.kind is _Kind.CONNECTOR:
            yield from self._hold_connector(token)
        elif token.kind is _Kind.OTHER:
            yield from self.close()
        else:
            yield from self._add_word(token)

    def close(self) -> Iterator[list[_Token]]:
        """Finish the current span: yields it unless empty or longer than ``MAX_SPAN_WORDS``."""
        span, self._span, self._connectors = self._span, [], []
        if 0 < len(span) <= MAX_SPAN_WORDS:
            yield span

    def _hold_connector(self, token: _Token) -> Iterator[list[_Token]]:
        # A connector only counts between two capitalised words: "of America" alone is nothing.
        if self._span:
            self._connectors.append(token)
        if len(self._connectors) > 2:
            yield from self.close()

    def _add_word(self, token: _Token) -> Iterator[list[_Token]]:
        phrase = " ".join(connector.word for connector in self._connectors)
        if self._connectors and phrase not in _CONNECTOR_PHRASES:
            yield from self.close()
        self._span.extend(self._connectors)
        self._span.append(token)
        self._connectors = []
        if token.closes:
            yield from self.close()
