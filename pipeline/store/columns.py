"""What search ranks a memory on without reading its ``_source``: columns (doc values).

Reading a hit's ``_source`` costs Elasticsearch a stored-fields visit per hit, whatever fields
are asked for, and a search ranks about a hundred candidates to show ten (docs/BENCHMARKS.md,
"Ranking on columns"). So every write of a memory also carries what ranking would otherwise
read from its text, as doc-values-only fields:
- ``content_terms``: the content words of its lemmatized text, once each, in order, space-joined
  (``pipeline.adapters.nlp.feedback.content_terms``), for the feedback signal;
- ``mentions_time``: whether its text carries a time (``timeexpr.mentions_time``), for the
  ``dated`` signal.
The other fields ranking reads (who said it, when, its job and turn) are keywords, dates and
integers, whose doc values exist already. ``RANK_FIELDS`` reads them all; ``columns_of`` gives
a hit's as the fields ranking reads, or None for a memory written before the columns existed
(or whose terms are longer than a column keeps), whose ``_source`` is then read instead.
Memories written before are given their columns at start (``pipeline.store.derived``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.adapters.nlp.feedback import content_terms
from pipeline.adapters.nlp.timeexpr import mentions_time

CONTENT_TERMS = "content_terms"
MENTIONS_TIME = "mentions_time"

TERMS_IGNORE_ABOVE = 8191
"""The longest ``content_terms`` a column keeps, in characters (a keyword's doc value is at
most 32,766 bytes of UTF-8); a memory with more is ranked from its ``_source``."""

COLUMN_MAPPING: dict[str, dict[str, Any]] = {
    CONTENT_TERMS: {"type": "keyword", "index": False, "ignore_above": TERMS_IGNORE_ABOVE},
    MENTIONS_TIME: {"type": "boolean", "index": False},
}
"""The columns' mapping: doc values only (never searched, never filtered on by callers)."""

_SINGLE = ("actor_id", "observed_at", "job_id", "turn", CONTENT_TERMS, MENTIONS_TIME)

RANK_FIELDS: list[str] = list(_SINGLE)
"""``docvalue_fields`` of a candidate: every field ranking reads of it."""


def rank_columns(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The columns that follow from ``fields`` (a memory's source, or the fields a partial
    update writes): each for the field it is made of, when that field is written."""
    out: dict[str, Any] = {}
    lemmatized = fields.get("text_lemmatized")
    if isinstance(lemmatized, str):
        out[CONTENT_TERMS] = " ".join(content_terms(lemmatized))
    text = fields.get("text")
    if isinstance(text, str):
        out[MENTIONS_TIME] = mentions_time(text)
    return out


def columns_of(hit: Mapping[str, Any]) -> dict[str, Any] | None:
    """A hit's ranking fields, read with ``RANK_FIELDS``, by name (single values; a field the
    memory does not have is left out); None when it has no columns."""
    values = hit.get("fields") or {}
    if CONTENT_TERMS not in values or MENTIONS_TIME not in values:
        return None
    return {name: values[name][0] for name in _SINGLE if values.get(name)}


def terms_of(doc: Mapping[str, Any]) -> list[str]:
    """A candidate's content terms: from its column, else from its lemmatized text."""
    column = doc.get(CONTENT_TERMS)
    if isinstance(column, str):
        return column.split()
    return content_terms(str(doc.get("text_lemmatized", "")))


def time_mentioned(doc: Mapping[str, Any]) -> bool:
    """Whether a candidate's text carries a time: from its column, else from its text."""
    column = doc.get(MENTIONS_TIME)
    if isinstance(column, bool):
        return column
    return mentions_time(str(doc.get("text", "")))
