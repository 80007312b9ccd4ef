"""memq's search filter language, translated into Elasticsearch query DSL.

The same clauses go into the kNN ``filter`` and the BM25 ``bool.filter``, so both retrievers
see exactly the same candidate set. A filter is a JSON object as a client sends it:

- ``{field: value}`` is equality; ``{field: "*"}`` means the field exists;
  ``{field: {op: value, ...}}`` applies operators ``eq ne gt gte lt lte in nin contains
  icontains`` (several operators on one field, or several fields in one object, are ANDed).
- ``{"AND": [f, ...]}``, ``{"OR": [f, ...]}``, ``{"NOT": f}`` or ``{"NOT": [f, ...]}`` (none of
  them) nest freely; lower-case ``and`` / ``or`` / ``not`` are aliases.

Fields and how they compare:

- keyword fields (``user_id agent_id run_id actor_id role memory_type attributed_to job_id hash
  language entity_ids replaced_by replaces``): exact terms; ``contains`` / ``icontains`` are
  substring matches (never wildcard, regexp or script).
- date fields (``created_at updated_at observed_at expiration_date``): ISO-8601 strings, dates or
  datetimes, normalized to UTC (a date or a naive value means UTC, a date alone its midnight).
- ``text``: full text; only ``contains`` / ``icontains`` (both a ``match_phrase``: the standard
  analyzer lower-cases, so the phrase match is already case-insensitive) and ``"*"``.
- metadata: ``metadata.<key>`` (``metadata.a.b`` for nested keys), or any other name (mem0
  compatibility: ``{"category": "food"}`` means ``metadata.category``). Metadata is a
  ``flattened`` field: every value is indexed as a keyword string, so numbers and booleans are
  compared as the strings JSON writes them (``10``, ``1.5``, ``true``) and range operators compare
  *lexicographically* (``"9" > "10"``; zero-pad numbers you mean to range over). A flattened
  field has no substring query on one key, so every memory also carries ``metadata_kv``, its
  metadata as ``"key.path=value"`` keywords, whose substrings answer ``contains`` /
  ``icontains`` on a key. ``{"metadata": {"contains": ...}}`` matches when *any* metadata
  value contains the substring.
- ``ne`` / ``nin`` also match documents that lack the field (as in mem0).
- ``contains`` / ``icontains`` on keyword and metadata fields are ``prefix`` queries on
  ``substrings``, where every memory carries each such value's suffixes (cut to
  ``MAX_SUBSTRING_CHARS``, see ``substring_terms``): a value contains ``x`` when one of its
  suffixes starts with ``x``, so the query seeks to ``x`` in the term dictionary instead of
  walking all of it as a ``*x*`` wildcard did (every tenant's terms on the shard). The operand
  is at most ``MAX_SUBSTRING_CHARS`` long (a whole value is ``eq``), at least
  ``MIN_TERM_SCAN_CHARS``, and a filter holds at most ``MAX_TERM_SCANS`` of them.

``tenant`` (it comes from the caller's key), ``embedding`` and ``text_lemmatized`` cannot be
filtered. Every mistake raises ``InvalidInputError`` whose ``field`` is the dotted path of the
offending key inside the filter object (list items by index, e.g. ``OR.1.created_at.gte``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

from pipeline.errors import InvalidInputError
from pipeline.store.indices import WHOLE_VALUE_FIELDS, memory_properties

MAX_DEPTH = 8
"""Filter objects nested deeper than this (the top-level object is level 1) are refused."""
MAX_LEAVES = 256
"""Conditions (one per field operator, ``"*"`` included) allowed in one filter."""
MAX_LIST_ITEMS = 1024
MAX_CONTAINS_CHARS = 256
MAX_LIST_VALUES = 2048
"""Values allowed in all the ``in`` / ``nin`` lists of one filter together: each value is a
term looked up on every segment, for the kNN filter and the BM25 query alike, so 60 lists of
``MAX_LIST_ITEMS`` made one search cost hundreds of milliseconds."""
LIST_VALUES_PER_UNIT = 512
"""In/nin list values that cost one unit of costly search work (``filter_cost``)."""
MAX_TERM_SCANS = 4
"""``contains`` / ``icontains`` conditions on keyword and metadata fields allowed in one filter
(a ``*value*`` wildcard once walked the field's whole term dictionary, so a filter of hundreds
of them made one search cost seconds; a prefix query on ``substrings`` is a seek, but a short
prefix still gathers many terms)."""
MAX_SUBSTRING_CHARS = 48
"""The longest ``contains`` / ``icontains`` operand on keyword and metadata fields, and how far
each suffix in ``substrings`` reaches: every substring of at most this length starts one."""
SUBSTRINGS_FIELD = "substrings"
MIN_TERM_SCAN_CHARS = 3
"""The shortest substring such a condition may look for (a shorter one matches nearly every
term, and costs the same walk)."""

Clause = dict[str, Any]
Scalar = str | int | float | bool


class _Kind(StrEnum):
    KEYWORD = "keyword"
    DATE = "date"
    TEXT = "text"
    METADATA = "metadata"
    METADATA_ROOT = "metadata root"


METADATA_PAIRS_FIELD = "metadata_kv"
_MAPPING = memory_properties(dims=1)  # the memories mapping: filterable fields follow it
# never filtered on by name
_INTERNAL = WHOLE_VALUE_FIELDS | {METADATA_PAIRS_FIELD, SUBSTRINGS_FIELD}
_KEYWORD_FIELDS = frozenset(
    name
    for name, spec in _MAPPING.items()
    if spec.get("type") == "keyword" and name not in _INTERNAL
)
_DATE_FIELDS = frozenset(name for name, spec in _MAPPING.items() if spec.get("type") == "date")
_FORBIDDEN = {
    "tenant": "the tenant always comes from the caller's key",
    "embedding": "vectors are searched, not filtered",
    "text_lemmatized": "it is internal: filter on 'text'",
    "content_terms": "it is internal: filter on 'text'",
    "mentions_time": "it is internal",
    "source_ids": "provenance is read with the memory (GET /v1/memories/{id}?include=sources)",
}
_LOGICAL = {"AND": "AND", "and": "AND", "OR": "OR", "or": "OR", "NOT": "NOT", "not": "NOT"}
_RANGE_OPS = ("gt", "gte", "lt", "lte")
_OPS = ("eq", "ne", *_RANGE_OPS, "in", "nin", "contains", "icontains")
_ALLOWED_OPS = {
    _Kind.KEYWORD: frozenset({*_OPS, "exists"}),
    _Kind.DATE: frozenset({"eq", "ne", *_RANGE_OPS, "in", "nin", "exists"}),
    _Kind.TEXT: frozenset({"contains", "icontains", "exists"}),
    _Kind.METADATA: frozenset({*_OPS, "exists"}),
    _Kind.METADATA_ROOT: frozenset({*_OPS, "exists"}),
}
_REGEX_LOOKING = re.compile(r"[\^$\[\](){}|+]|\.\*")


@dataclass(frozen=True)
class _Field:
    """A resolved filter field: its Elasticsearch path and how its values compare."""

    path: str
    kind: _Kind


class _Budget:
    """Counts the conditions of one translation against ``MAX_LEAVES``, the substring
    conditions among them against ``MAX_TERM_SCANS``, and their list values against
    ``MAX_LIST_VALUES``."""

    def __init__(self) -> None:
        self.leaves = 0
        self.scans = 0
        self.values = 0

    def take(self, where: str) -> None:
        self.leaves += 1
        if self.leaves > MAX_LEAVES:
            raise InvalidInputError(
                f"filter has more than {MAX_LEAVES} conditions (at {where!r})", field=where
            )

    def take_scan(self, field: _Field, op: str, operand: object, where: str) -> None:
        """Count a substring condition that walks a term dictionary (keyword and metadata
        fields; ``text`` is a phrase match, which does not)."""
        if op not in ("contains", "icontains") or field.kind is _Kind.TEXT:
            return
        if isinstance(operand, str) and len(operand) < MIN_TERM_SCAN_CHARS:
            raise InvalidInputError(
                f"{where!r}: {op} on {field.path} needs at least {MIN_TERM_SCAN_CHARS} "
                "characters (a shorter substring matches nearly everything)",
                field=where,
            )
        if isinstance(operand, str) and len(operand) > MAX_SUBSTRING_CHARS:
            raise InvalidInputError(
                f"{where!r}: {op} on {field.path} takes at most {MAX_SUBSTRING_CHARS} "
                "characters (use eq or in for a whole value)",
                field=where,
            )
        self.scans += 1
        if self.scans > MAX_TERM_SCANS:
            raise InvalidInputError(
                f"filter has more than {MAX_TERM_SCANS} contains/icontains conditions on "
                f"keyword or metadata fields (at {where!r}): narrow with eq/in, or use "
                "contains on text",
                field=where,
            )

    def take_values(self, op: str, operand: object, where: str) -> None:
        """Count the values of an ``in`` / ``nin`` list: each is a term lookup."""
        if op not in ("in", "nin") or not isinstance(operand, list | tuple):
            return
        self.values += len(operand)
        if self.values > MAX_LIST_VALUES:
            raise InvalidInputError(
                f"filter has more than {MAX_LIST_VALUES} values in its in/nin lists together "
                f"(at {where!r}); each is looked up on every segment of the index",
                field=where,
            )


def translate_filters(filters: Mapping[str, Any] | None) -> list[Clause]:
    """Translate a filter object into Elasticsearch clauses for a bool ``filter``.

    Returns ``[]`` for ``None`` or ``{}``; otherwise one clause per top-level key (and per
    operator of a field), all meant to be ANDed: put them in ``bool.filter`` or a kNN ``filter``.
    Raises ``InvalidInputError`` (``field`` = dotted path of the offending key) on any mistake.
    """
    if filters is None:
        return []
    return _clauses(filters, "", 1, _Budget())


def search_slots(filters: Mapping[str, Any] | None) -> int:
    """How many of its tenant's search slots a search with ``filters`` takes
    (``api/search_slots.py``): 1, plus 1 when it holds substring conditions on keyword or
    metadata fields, plus 1 per whole ``MAX_LIST_ITEMS`` values of its in/nin lists; so 4 for
    the costliest filter allowed. A filter that is refused takes 1 (the search refuses it)."""
    budget = _counted(filters)
    if budget is None:
        return 1
    return 1 + (1 if budget.scans else 0) + budget.values // MAX_LIST_ITEMS


def filter_cost(filters: Mapping[str, Any] | None) -> int:
    """The work ``filters`` add to a search, in units of costly search work
    (``pipeline.serving.search_cost``): 1 per substring condition on a keyword or metadata field (a
    seek that expands to every matching term of a dictionary all tenants share), plus 1 per
    whole ``LIST_VALUES_PER_UNIT`` values of the in/nin lists (each value a term looked up on
    every segment, and carried as JSON through the API and into each query); so 8 for the
    costliest filter allowed, 0 for one without either (or with short lists). A refused filter
    costs 0 (the search refuses it)."""
    budget = _counted(filters)
    if budget is None:
        return 0
    return budget.scans + budget.values // LIST_VALUES_PER_UNIT


def _counted(filters: Mapping[str, Any] | None) -> _Budget | None:
    """The conditions of ``filters`` counted; None when they are refused."""
    budget = _Budget()
    try:
        _clauses(filters or {}, "", 1, budget)
    except InvalidInputError:
        return None
    return budget


def _clauses(node: object, path: str, depth: int, budget: _Budget) -> list[Clause]:
    """The clauses of one filter object (its keys ANDed)."""
    where = path or "filters"
    if not isinstance(node, Mapping):
        raise InvalidInputError(
            f"filter {where!r} must be an object, not {type(node).__name__}", field=path or None
        )
    if depth > MAX_DEPTH:
        raise InvalidInputError(
            f"filter {where!r} is nested deeper than {MAX_DEPTH} levels", field=path or None
        )
    out: list[Clause] = []
    for key, value in node.items():
        key_path = _join(path, key)
        logical = _LOGICAL.get(key) if isinstance(key, str) else None
        if logical is None:
            out.extend(_leaf(key, value, key_path, budget))
        else:
            out.append(_logical(logical, value, key_path, depth, budget))
    return out


def _logical(op: str, value: object, path: str, depth: int, budget: _Budget) -> Clause:
    """AND / OR over a non-empty list, NOT over one filter or a non-empty list (none of them)."""
    if op == "NOT" and isinstance(value, Mapping):
        return {"bool": {"must_not": [_single(value, path, depth + 1, budget)]}}
    if not isinstance(value, list | tuple) or not value:
        expected = "a filter or a non-empty list of filters" if op == "NOT" else "a non-empty list"
        raise InvalidInputError(f"{path!r}: {op} needs {expected}", field=path)
    children = [_single(item, f"{path}.{i}", depth + 1, budget) for i, item in enumerate(value)]
    if op == "AND":
        return {"bool": {"filter": children}}
    if op == "OR":
        return {"bool": {"should": children, "minimum_should_match": 1}}
    return {"bool": {"must_not": children}}


def _single(node: object, path: str, depth: int, budget: _Budget) -> Clause:
    """One filter object as one clause; an empty object is refused (it would match all)."""
    clauses = _clauses(node, path, depth, budget)
    if not clauses:
        raise InvalidInputError(f"filter {path!r} is empty", field=path)
    return clauses[0] if len(clauses) == 1 else {"bool": {"filter": clauses}}


def _leaf(key: object, value: object, path: str, budget: _Budget) -> list[Clause]:
    """The clauses of ``{key: value}``: one per operator."""
    field = _resolve_field(key, path)
    clauses: list[Clause] = []
    for op, operand, op_path in _conditions(value, path):
        budget.take(op_path)
        if op not in _ALLOWED_OPS[field.kind]:
            raise InvalidInputError(_refusal(field, op, path), field=op_path)
        clauses.append(_BUILDERS[op](field, operand, op_path))  # checks the operand first
        budget.take_scan(field, op, operand, op_path)
        budget.take_values(op, operand, op_path)
    return clauses


def _conditions(value: object, path: str) -> list[tuple[str, object, str]]:
    """``(operator, operand, path)`` triples of one field's value."""
    if value == "*" and isinstance(value, str):
        return [("exists", None, path)]
    if not isinstance(value, Mapping):
        return [("eq", value, path)]
    if not value:
        raise InvalidInputError(f"{path!r} has no operator", field=path)
    out: list[tuple[str, object, str]] = []
    for op, operand in value.items():
        op_path = _join(path, op)
        if op not in _OPS:
            raise InvalidInputError(
                f"{path!r}: unknown operator {op!r} (expected one of {', '.join(_OPS)})",
                field=op_path,
            )
        out.append((op, operand, op_path))
    return out


def _resolve_field(key: object, path: str) -> _Field:
    """Map a filter key to an Elasticsearch field, refusing malformed and forbidden names."""
    name = _checked_name(key, path)
    if name in _FORBIDDEN:
        raise InvalidInputError(f"cannot filter on {name!r}: {_FORBIDDEN[name]}", field=path)
    if name in _KEYWORD_FIELDS:
        return _Field(name, _Kind.KEYWORD)
    if name in _DATE_FIELDS:
        return _Field(name, _Kind.DATE)
    if name == "text":
        return _Field(name, _Kind.TEXT)
    if name == "metadata":
        return _Field(name, _Kind.METADATA_ROOT)
    if name.startswith("metadata."):
        return _Field(name, _Kind.METADATA)
    return _Field(f"metadata.{name}", _Kind.METADATA)


def _checked_name(key: object, path: str) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidInputError(f"filter field names must be non-empty strings: {path!r}", path)
    if key.startswith("_"):
        raise InvalidInputError(f"filter field {key!r} may not start with '_'", field=path)
    if "*" in key or any(char.isspace() for char in key):
        raise InvalidInputError(
            f"filter field {key!r} may not contain whitespace or '*'", field=path
        )
    if "" in key.split("."):
        raise InvalidInputError(f"filter field {key!r} has an empty path segment", field=path)
    return key


def _refusal(field: _Field, op: str, path: str) -> str:
    shown = "'*'" if op == "exists" else op
    return f"{path!r}: operator {shown} is not allowed on a {field.kind} field"


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


# -- values ----------------------------------------------------------------------------------


def _scalar(field: _Field, value: object, path: str) -> Scalar:
    """One comparable value for ``field``: dates normalized, metadata values as strings."""
    if value is None or not isinstance(value, str | int | float | bool | date):
        kind = "null" if value is None else type(value).__name__
        raise InvalidInputError(f"{path!r} needs a single value, not {kind}", field=path)
    if field.kind is _Kind.DATE:
        return _date_value(value, path)
    if isinstance(value, date):
        raise InvalidInputError(f"{path!r}: dates only compare on date fields", field=path)
    if field.kind in (_Kind.METADATA, _Kind.METADATA_ROOT):
        return _metadata_string(value)
    return value


def _date_value(value: object, path: str) -> str:
    """An ISO-8601 string, date or datetime as a UTC ISO-8601 string."""
    parsed: object = value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInputError(
                f"{path!r}: {value!r} is not an ISO-8601 date or datetime", field=path
            ) from None
    if isinstance(parsed, datetime):
        aware = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
        return aware.astimezone(UTC).isoformat(timespec="milliseconds")
    if isinstance(parsed, date):
        return datetime(parsed.year, parsed.month, parsed.day, tzinfo=UTC).isoformat(
            timespec="milliseconds"
        )
    raise InvalidInputError(f"{path!r} needs an ISO-8601 date, not {value!r}", field=path)


MAX_METADATA_PAIRS = 1000
METADATA_IGNORE_ABOVE = 1024
"""``ignore_above`` of ``metadata`` and ``metadata_kv``: a longer value (pair) is not indexed."""


def metadata_pairs(metadata: Mapping[str, Any]) -> list[str]:
    """``"key.path=value"`` for each scalar of ``metadata`` (list items each), values written
    as the flattened field indexes them; at most ``MAX_METADATA_PAIRS``."""
    return [f"{key}={value}" for key, value in _metadata_items(metadata)]


def _metadata_items(metadata: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key.path, value)`` for each scalar of ``metadata``, as ``metadata_pairs`` says."""
    items: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in metadata.items()]
    while stack and len(items) < MAX_METADATA_PAIRS:
        key, value = stack.pop(0)
        if isinstance(value, Mapping):
            stack += [(f"{key}.{k}", v) for k, v in value.items()]
        elif isinstance(value, list | tuple):
            stack += [(key, item) for item in value]
        elif value is not None:
            items.append((key, _metadata_string(value)))
    return items


def substring_terms(fields: Mapping[str, Any]) -> dict[str, list[str]]:
    """The ``substrings`` of the substring-searchable fields among ``fields`` (a memory's
    ``_source``, or the fields a partial update writes), by field: every suffix of each
    keyword value, cut to ``MAX_SUBSTRING_CHARS``; for ``metadata``, those of each value
    under ``metadata`` (``contains`` on the metadata root) and, under ``metadata_kv``, each
    prefixed with its ``key.path=`` (``contains`` on one key). Values Elasticsearch leaves
    unindexed (``METADATA_IGNORE_ABOVE``) get none, so a substring finds what a wildcard over
    the field found. A partial update writes the part for the fields it changes: Elasticsearch
    merges objects, so updates of different fields keep each other's part."""
    out: dict[str, list[str]] = {}
    for name in sorted(_KEYWORD_FIELDS & fields.keys()):
        value = fields[name]
        values = value if isinstance(value, list | tuple) else [value]
        out[name] = sorted({cut for v in values if isinstance(v, str) for cut in _suffixes(v)})
    metadata = fields.get("metadata")
    if isinstance(metadata, Mapping):
        items = _metadata_items(metadata)
        kept = [(k, v) for k, v in items if len(k) + 1 + len(v) <= METADATA_IGNORE_ABOVE]
        out["metadata"] = sorted({cut for _, v in items for cut in _suffixes(v, unless_above=True)})
        out[METADATA_PAIRS_FIELD] = sorted({f"{k}={cut}" for k, v in kept for cut in _suffixes(v)})
    return out


def substring_fields() -> frozenset[str]:
    """The source fields ``substring_terms`` reads."""
    return _KEYWORD_FIELDS | {"metadata"}


def with_substrings(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` (a memory's source, or a partial update of one) with the ``substrings`` of
    the searchable fields among them, as every write of a memory must carry them."""
    parts = substring_terms(fields)
    return {**fields, SUBSTRINGS_FIELD: parts} if parts else dict(fields)


def _suffixes(value: str, unless_above: bool = False) -> list[str]:
    """Every suffix of ``value`` cut to ``MAX_SUBSTRING_CHARS`` (none for a value longer than
    ``METADATA_IGNORE_ABOVE`` when ``unless_above``)."""
    if unless_above and len(value) > METADATA_IGNORE_ABOVE:
        return []
    return [value[i : i + MAX_SUBSTRING_CHARS] for i in range(len(value))]


def _metadata_string(value: Scalar) -> str:
    """The string a flattened field indexed for this JSON value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _values(field: _Field, value: object, path: str) -> list[Scalar]:
    if not isinstance(value, list | tuple):
        raise InvalidInputError(f"{path!r} needs a list of values", field=path)
    if not 1 <= len(value) <= MAX_LIST_ITEMS:
        raise InvalidInputError(
            f"{path!r} needs between 1 and {MAX_LIST_ITEMS} values, not {len(value)}", field=path
        )
    return [_scalar(field, item, f"{path}.{i}") for i, item in enumerate(value)]


def _substring(value: object, path: str) -> str:
    """A ``contains`` operand: a non-empty string that does not look like a regex."""
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{path!r} needs a non-empty string", field=path)
    if len(value) > MAX_CONTAINS_CHARS:
        raise InvalidInputError(
            f"{path!r} is longer than {MAX_CONTAINS_CHARS} characters", field=path
        )
    if _REGEX_LOOKING.search(value):
        raise InvalidInputError(
            f"{path!r}: {value!r} looks like a regular expression; contains matches a plain "
            "substring (regex characters ^ $ [ ] ( ) { } | + and .* are not allowed)",
            field=path,
        )
    return value


# -- clauses ---------------------------------------------------------------------------------


def _eq(field: _Field, value: object, path: str) -> Clause:
    return {"term": {field.path: _scalar(field, value, path)}}


def _ne(field: _Field, value: object, path: str) -> Clause:
    return {"bool": {"must_not": [_eq(field, value, path)]}}


def _in(field: _Field, value: object, path: str) -> Clause:
    return {"terms": {field.path: _values(field, value, path)}}


def _nin(field: _Field, value: object, path: str) -> Clause:
    return {"bool": {"must_not": [_in(field, value, path)]}}


def _range(op: str) -> Callable[[_Field, object, str], Clause]:
    def build(field: _Field, value: object, path: str) -> Clause:
        if isinstance(value, bool):
            raise InvalidInputError(f"{path!r}: {op} cannot compare a boolean", field=path)
        return {"range": {field.path: {op: _scalar(field, value, path)}}}

    return build


def _contains(insensitive: bool) -> Callable[[_Field, object, str], Clause]:
    def build(field: _Field, value: object, path: str) -> Clause:
        text = _substring(value, path)
        if field.kind is _Kind.TEXT:
            return {"match_phrase": {field.path: {"query": text}}}
        if field.kind is _Kind.METADATA:
            key = field.path.removeprefix("metadata.")
            return _prefix(METADATA_PAIRS_FIELD, f"{key}={text}", insensitive)
        return _prefix(field.path, text, insensitive)

    return build


def _prefix(source_field: str, value: str, insensitive: bool) -> Clause:
    """A substring match: the ``substrings`` of ``source_field`` that start with ``value``."""
    target = f"{SUBSTRINGS_FIELD}.{source_field}"
    return {"prefix": {target: {"value": value, "case_insensitive": insensitive}}}


def _exists(field: _Field, _value: object, _path: str) -> Clause:
    return {"exists": {"field": field.path}}


_BUILDERS: dict[str, Callable[[_Field, object, str], Clause]] = {
    "eq": _eq,
    "ne": _ne,
    "in": _in,
    "nin": _nin,
    **{op: _range(op) for op in _RANGE_OPS},
    "contains": _contains(insensitive=False),
    "icontains": _contains(insensitive=True),
    "exists": _exists,
}


# -- the scope inside a filter ---------------------------------------------------------------

SCOPE_KEYS = ("user_id", "agent_id", "run_id")


@dataclass(frozen=True)
class ScopeSplit:
    """A filter taken apart: the scope ids it names by equality, and every other condition."""

    ids: dict[str, str]
    rest: dict[str, Any] | None


def split_scope(filters: object) -> ScopeSplit:
    """The ``user_id`` / ``agent_id`` / ``run_id`` equalities at the top of ``filters`` or in
    its top-level ``AND`` (where mem0 2.x callers put the scope), and the filter without them.

    Only a plain string equality becomes the scope; every other condition on those keys
    (``{"user_id": {"ne": "alice"}}``, ``"*"``) and every other key beside ``AND`` (a ``NOT``,
    an ``OR``) stays in ``rest``, ANDed. Two different values for one id can match nothing and
    are surely a mistake: ``InvalidInputError`` says so rather than answering empty.
    """
    if not isinstance(filters, Mapping):
        return ScopeSplit({}, None)
    ids: dict[str, str] = {}
    rest = _without_scope(filters, ids, "")
    for key in _LOGICAL_AND & filters.keys():
        items = filters[key]
        if isinstance(items, list):
            kept = [_without_scope(item, ids, f"{key}.{i}") for i, item in enumerate(items)]
            kept = [item for item in kept if item != {}]
            rest.pop(key)
            if kept:
                rest[key] = kept
    return ScopeSplit(ids, rest or None)


_LOGICAL_AND = frozenset({"AND", "and"})


def _without_scope(node: object, ids: dict[str, str], path: str) -> Any:
    """``node`` without its scope equalities, which are added to ``ids`` (a conflicting one
    raises ``InvalidInputError``); anything that is not an object is returned as it is, for
    ``translate_filters`` to refuse."""
    if not isinstance(node, Mapping):
        return node
    kept: dict[str, Any] = {}
    for key, value in node.items():
        if key in SCOPE_KEYS and isinstance(value, str) and value != "*":
            if ids.setdefault(key, value) != value:
                where = _join(path, key)
                raise InvalidInputError(
                    f"filters name two different {key} values ({ids[key]!r} and {value!r}); "
                    "a memory has one, so nothing could match",
                    field=where,
                )
        else:
            kept[key] = value
    return kept
