"""The ranking columns (``pipeline.store.columns``): what ranking reads of a memory without
its source is what it would have read from its text and lemmas."""

from __future__ import annotations

from pipeline.adapters.nlp.feedback import content_terms, expansion_of, share_of
from pipeline.adapters.nlp.timeexpr import mentions_time
from pipeline.store.columns import (
    RANK_FIELDS,
    columns_of,
    rank_columns,
    terms_of,
    time_mentioned,
)
from pipeline.store.derived import with_derived

TEXT = "We moved to Berlin in May 2021, the kids love the new school"
LEMMAS = "we move to Berlin in May 2021 , the kid love the new school"


def test_a_write_carries_the_columns_made_of_its_text_and_lemmas() -> None:
    columns = rank_columns({"text": TEXT, "text_lemmatized": LEMMAS})
    assert columns == {"content_terms": " ".join(content_terms(LEMMAS)), "mentions_time": True}
    assert rank_columns({"feedback": "POSITIVE"}) == {}  # a write that changes neither
    derived = with_derived({"text": TEXT, "text_lemmatized": LEMMAS, "agent_id": "travel"})
    assert derived["mentions_time"] is True and "substrings" in derived
    assert "content_terms" not in derived["substrings"]  # a column, never filtered on


def test_ranking_reads_the_same_from_the_columns_as_from_the_source() -> None:
    source = {"text": TEXT, "text_lemmatized": LEMMAS}
    hit = {"fields": {k: [v] for k, v in rank_columns(source).items()} | {"turn": [3]}}
    column = columns_of(hit)
    assert column is not None and column["turn"] == 3
    assert terms_of(column) == terms_of(source) == content_terms(LEMMAS)
    assert time_mentioned(column) is time_mentioned(source) is mentions_time(TEXT)
    empty = columns_of({"fields": {"content_terms": [""], "mentions_time": [False]}})
    assert empty is not None and terms_of(empty) == []


def test_a_memory_without_columns_is_read_from_its_source() -> None:
    assert columns_of({"fields": {"actor_id": ["maria"]}}) is None
    assert columns_of({}) is None
    assert set(RANK_FIELDS) >= {"actor_id", "observed_at", "job_id", "turn"}


def test_feedback_reads_the_same_from_the_columns_as_from_the_sources() -> None:
    lemmas = [LEMMAS, "the kid start at a new school in Berlin", "we love Berlin"]
    sources = [{"text_lemmatized": lemma, "text": lemma} for lemma in lemmas]
    hits = [{"fields": {k: [v] for k, v in rank_columns(s).items()}} for s in sources]
    columns = [columns_of(hit) for hit in hits]
    assert all(c is not None and "text_lemmatized" not in c for c in columns)
    query = "where do the kid go to school"
    from_sources = expansion_of([terms_of(s) for s in sources], query, 3)
    from_columns = expansion_of([terms_of(c or {}) for c in columns], query, 3)
    assert from_columns == from_sources == ["berlin", "love", "new"]
    for source, column in zip(sources, columns, strict=True):
        mentioned = frozenset(terms_of(source))
        assert share_of(frozenset(terms_of(column or {})), from_sources) == share_of(
            mentioned, from_sources
        )
