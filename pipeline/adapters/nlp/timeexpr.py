"""Time expressions in a search query, as periods a memory's ``observed_at`` can be near.

"What did Maria do in May 2023?", "…last week", "…3 days ago", "…on 7 May": each names a
period. ``periods`` turns the expressions of a query into half-open ``[start, end)`` periods,
relative ones resolved against a reference time the caller gives (by default, now). A month or
a day without a year is its latest occurrence not after the reference. ``asks_when`` tells a
question whose answer is a time ("When did…", "How long ago…", "What year…"), and
``mentions_time`` a text that carries one ("yesterday", "last Friday", "in 2022").

Hand-written rather than a date-parsing library: search needs the *period* an expression names
(a month, a week, a year), not one instant, and a library such as dateparser answers with a
single datetime (the missing day filled in from today) and, in free-text search, also reads
ordinary words ("may", "sat", "second") as dates. The rules here are plain English patterns,
deterministic and offline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
WEEKDAYS = {
    name: number
    for number, names in enumerate(
        [
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        ]
    )
    for name in names
}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "few": 3,
    "a few": 3,
    "several": 3,
}

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
FULL_MONTHS = [name for name, number in MONTHS.items() if len(name) > 3 or name == "may"]
FULL_MONTHS = [name for name in FULL_MONTHS if name not in ("sept",)]
_FULL_MONTH = r"(?P<month>" + "|".join(FULL_MONTHS) + r")"
# Capitalised full month names other than "May" (a verb too often at a sentence start).
_NAMED_MONTH = r"(?P<month>" + "|".join(m.title() for m in FULL_MONTHS if m != "may") + r")"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_UNIT = r"(?P<unit>day|week|weekend|month|year)s?"
_CALENDAR_UNIT = r"(?P<unit>week|weekend|month|year)"
_COUNT = r"(?P<count>\d+|" + "|".join(sorted(NUMBERS, key=len, reverse=True)) + r")"
_WEEKDAY = r"(?P<weekday>" + "|".join(sorted(WEEKDAYS, key=len, reverse=True)) + r")"

_NAMED_MONTH_RE = re.compile(rf"\b{_NAMED_MONTH}\b")  # case matters: "March" but not "march"

# Each pattern has a name that says how its match becomes a period (see ``_period``).
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b")),
    ("day_month_year", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I)),
    ("month_day_year", re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I)),
    ("month_year", re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b", re.I)),
    ("day_month", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_FULL_MONTH}\b", re.I)),
    ("month_day", re.compile(rf"\b{_FULL_MONTH}\s+{_DAY}\b(?!\s*(?:[:.]\d|am|pm))", re.I)),
    # "in May", "since June": a bare "may" is a verb too often, so a month alone needs a
    # preposition in front, or its full name and a capital letter.
    ("month", re.compile(rf"\b(?:in|during|since|by|of|early|late|mid)\s+{_FULL_MONTH}\b", re.I)),
    ("month", _NAMED_MONTH_RE),
    ("year", re.compile(rf"\b{_YEAR}\b")),
    ("yesterday", re.compile(r"\byesterday\b", re.I)),
    ("today", re.compile(r"\b(?:today|tonight|this morning|this evening)\b", re.I)),
    ("last_night", re.compile(r"\blast night\b", re.I)),
    ("ago", re.compile(rf"\b{_COUNT}\s+{_UNIT}\s+ago\b", re.I)),
    ("last_unit", re.compile(rf"\b(?:last|past|previous)\s+{_CALENDAR_UNIT}\b", re.I)),
    ("this_unit", re.compile(rf"\bthis\s+{_CALENDAR_UNIT}\b", re.I)),
    ("next_unit", re.compile(rf"\bnext\s+{_CALENDAR_UNIT}\b", re.I)),
    ("last_weekday", re.compile(rf"\b(?:last|past|this|on)\s+{_WEEKDAY}\b", re.I)),
]
# Time words that date a text but name no period of their own.
_VAGUE = re.compile(
    r"\b(?:recently|lately|the other day|a while ago|ages ago|back then|these days|"
    r"tomorrow|soon|upcoming|someday|years? ago|when i was|as a kid|since)\b",
    re.I,
)
_WHEN = re.compile(
    r"^\s*(?:when\b|how long ago\b|how long\b|since when\b|what (?:year|month|date|day|time)\b|"
    r"which (?:year|month|date|day)\b|in what (?:year|month)\b|on what (?:date|day)\b)",
    re.I,
)


@dataclass(frozen=True)
class Period:
    """A half-open span of time ``[start, end)`` named by ``text`` in a query."""

    text: str
    start: datetime
    end: datetime

    @property
    def days(self) -> float:
        return (self.end - self.start).total_seconds() / 86400


def periods(text: str, reference: datetime) -> list[Period]:
    """The periods the time expressions of ``text`` name, relative ones resolved against
    ``reference`` (an aware datetime: the periods share its time zone). Overlapping matches
    keep the most specific (earliest pattern); expressions that name no valid date (31 June)
    are skipped."""
    found: list[Period] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in PATTERNS:
        for match in pattern.finditer(text):
            span = match.span()
            if any(span[0] < end and start < span[1] for start, end in taken):
                continue
            period = _period(kind, match, reference)
            if period is not None:
                taken.append(span)
                found.append(period)
    return found


def _any_of(patterns: list[re.Pattern[str]], flags: int) -> re.Pattern[str]:
    """One pattern matching wherever one of ``patterns`` does (their group names dropped)."""
    bodies = [re.sub(r"\(\?P<\w+>", "(?:", p.pattern) for p in patterns]
    return re.compile("|".join(f"(?:{body})" for body in bodies), flags)


# ``mentions_time`` runs over every candidate of a "when" question: one pass per text, not one
# per pattern. The case-sensitive month names stay a pattern of their own.
_DATED = _any_of([_VAGUE, *(p for _, p in PATTERNS if p is not _NAMED_MONTH_RE)], re.IGNORECASE)


# Words that date a text on their own, and words that may (confirmed by the patterns). Every
# pattern needs one of them or a year, so most texts are answered by one cheap tokenization.
_TIME_WORDS = frozenset(
    [
        *FULL_MONTHS,
        *(d for d in WEEKDAYS if len(d) > 5),
        "yesterday",
        "today",
        "tonight",
        "tomorrow",
        "ago",
        "week",
        "weeks",
        "weekend",
        "weekends",
        "month",
        "months",
        "year",
        "years",
        "recently",
        "lately",
        "upcoming",
        "someday",
    ]
) - {"may", "march"}
_MAYBE_TIME_WORDS = frozenset([*MONTHS, *WEEKDAYS, "night", "morning", "evening", "day", "days"])
_MAYBE_TIME_WORDS |= {"then", "soon", "when", "kid", "since"}
_TOKEN = re.compile(r"[a-z]+|\d+")


def _time_words(text: str) -> tuple[bool, bool]:
    """(a word that dates the text, a word that may): one pass over the text's tokens."""
    maybe = False
    for token in _TOKEN.findall(text.lower()):
        if token in _TIME_WORDS or (len(token) == 4 and token[:2] in ("19", "20")):
            return True, True
        maybe = maybe or token in _MAYBE_TIME_WORDS
    return False, maybe


def mentions_time(text: str) -> bool:
    """Whether ``text`` carries a time: a date, a month, a year, a relative expression."""
    surely, maybe = _time_words(text)
    if surely or not maybe:
        return surely
    return bool(_DATED.search(text) or _NAMED_MONTH_RE.search(text))


def asks_when(query: str) -> bool:
    """Whether ``query`` asks for a time ("When did…", "How long ago…", "What year…")."""
    return bool(_WHEN.search(query))


# -- from a match to a period -------------------------------------------------------------------


def _period(kind: str, match: re.Match[str], reference: datetime) -> Period | None:
    try:
        bounds = _BUILDERS[kind](match.groupdict(), _midnight(reference))
    except (ValueError, OverflowError):  # 31 June, month 13, a day before year 1
        return None
    return Period(match.group(0), *bounds) if bounds is not None else None


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_number(value: str) -> int:
    return int(value) if value.isdigit() else MONTHS[value.lower().rstrip(".")]


def _day_span(day: datetime) -> tuple[datetime, datetime]:
    return day, day + timedelta(days=1)


def _month_span(year: int, month: int, like: datetime) -> tuple[datetime, datetime]:
    start = like.replace(year=year, month=month, day=1)
    end = start.replace(year=year + 1, month=1) if month == 12 else start.replace(month=month + 1)
    return start, end


def _latest_year(month: int, day: int, today: datetime) -> int:
    """The year of the latest ``month``/``day`` not after ``today``."""
    return today.year if (month, day) <= (today.month, today.day) else today.year - 1


Bounds = tuple[datetime, datetime] | None


def _date(g: dict[str, str], today: datetime) -> Bounds:
    return _day_span(today.replace(int(g["year"]), _month_number(g["month"]), int(g["day"])))


def _day_month(g: dict[str, str], today: datetime) -> Bounds:
    month, day = _month_number(g["month"]), int(g["day"])
    return _day_span(today.replace(_latest_year(month, day, today), month, day))


def _month_year(g: dict[str, str], today: datetime) -> Bounds:
    return _month_span(int(g["year"]), _month_number(g["month"]), today)


def _month(g: dict[str, str], today: datetime) -> Bounds:
    month = _month_number(g["month"])
    return _month_span(_latest_year(month, 1, today), month, today)


def _year(g: dict[str, str], today: datetime) -> Bounds:
    year = int(g["year"])
    return today.replace(year, 1, 1), today.replace(year + 1, 1, 1)


def _unit_span(unit: str, today: datetime, offset: int) -> tuple[datetime, datetime]:
    """The calendar ``unit`` (week from Monday, weekend = Saturday and Sunday) ``offset`` units
    from the one holding ``today``."""
    unit = unit.lower()
    if unit == "day":
        return _day_span(today + timedelta(days=offset))
    if unit in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=offset)
        if unit == "weekend":
            return monday + timedelta(days=5), monday + timedelta(days=7)
        return monday, monday + timedelta(days=7)
    if unit == "month":
        index = today.year * 12 + today.month - 1 + offset
        return _month_span(index // 12, index % 12 + 1, today)
    return today.replace(today.year + offset, 1, 1), today.replace(today.year + offset + 1, 1, 1)


def _ago(g: dict[str, str], today: datetime) -> Bounds:
    count = g["count"].lower()
    number = int(count) if count.isdigit() else NUMBERS[count]
    return _unit_span(g["unit"], today, -number)


def _last_weekday(g: dict[str, str], today: datetime) -> Bounds:
    back = (today.weekday() - WEEKDAYS[g["weekday"].lower()]) % 7 or 7
    return _day_span(today - timedelta(days=back))


_BUILDERS = {
    "iso": _date,
    "day_month_year": _date,
    "month_day_year": _date,
    "month_year": _month_year,
    "day_month": _day_month,
    "month_day": _day_month,
    "month": _month,
    "year": _year,
    "yesterday": lambda g, today: _day_span(today - timedelta(days=1)),
    "today": lambda g, today: _day_span(today),
    "last_night": lambda g, today: _day_span(today - timedelta(days=1)),
    "ago": _ago,
    "last_unit": lambda g, today: _unit_span(g["unit"], today, -1),
    "this_unit": lambda g, today: _unit_span(g["unit"], today, 0),
    "next_unit": lambda g, today: _unit_span(g["unit"], today, 1),
    "last_weekday": _last_weekday,
}


def closeness(moment: datetime | None, found: list[Period]) -> float:
    """How near ``moment`` is to the nearest of ``found``, in [0, 1]: 1 inside a period, then
    halving with every period-length (at least a week) away; 0 when there is no moment."""
    if moment is None or not found:
        return 0.0
    best = 0.0
    for period in found:
        if period.start <= moment < period.end:
            return 1.0
        gap = (period.start - moment) if moment < period.start else (moment - period.end)
        scale = max(period.days, 7.0)
        best = max(best, 0.5 ** (gap.total_seconds() / 86400 / scale))
    return best
