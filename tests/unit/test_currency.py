"""The newer statement first (``pipeline.serving.currency``): which questions are about the present,
and how rivals among a search's best hits are reordered, and only they."""

from __future__ import annotations

from datetime import UTC, datetime

from pipeline.serving.currency import (
    Rivalry,
    asks_about_present,
    may_have_rivals,
    newer_first,
    past_asked_since,
)
from pipeline.serving.search_models import Explain, SearchHit

NOW = datetime(2025, 3, 1, tzinfo=UTC)
RIVALRY = Rivalry(pair_similarity=0.3, score_ratio=0.7)
NEAR, OTHER = [1.0, 0.2, 0.0], [0.0, 0.1, 1.0]  # cosine 0 between NEAR-ish and OTHER


def hit(memory: str, score: float) -> SearchHit:
    explain = Explain(semantic=0, bm25=0, bm25_raw=0, entity=0, fused=score)
    return SearchHit(id=memory, memory=memory, score=score, explain=explain)


def doc(speaker: str, year: int) -> dict[str, str]:
    return {"actor_id": speaker, "observed_at": datetime(year, 5, 1, tzinfo=UTC).isoformat()}


def test_a_question_is_about_the_present_unless_it_names_a_past_period() -> None:
    assert asks_about_present("Where does Maria live now?", NOW)
    assert asks_about_present("Where does Maria live?", NOW)
    assert asks_about_present("What did Maria do this year?", NOW)
    assert not asks_about_present("Where did Maria live in 2022?", NOW)
    assert not asks_about_present("What did Maria cook last week?", NOW)
    assert not asks_about_present("When did Maria move to Berlin?", NOW)


def test_a_question_about_a_past_period_asks_since_its_start() -> None:
    assert past_asked_since("Where did Maria live in 2022?", NOW) == datetime(
        2022, 1, 1, tzinfo=UTC
    )
    assert past_asked_since("Where does Maria live now?", NOW) is None
    assert past_asked_since("What did Maria do this year?", NOW) is None


def test_the_newer_of_two_rivals_goes_just_above_the_older_and_the_rest_stay() -> None:
    hits = [hit("lisbon", 0.80), hit("jazz", 0.70), hit("berlin", 0.60)]
    docs = {"lisbon": doc("Maria", 2022), "jazz": doc("Maria", 2021), "berlin": doc("Maria", 2024)}
    vectors = {"lisbon": [1.0, 0.3, 0.0], "berlin": [1.0, 0.0, 0.1], "jazz": OTHER}
    assert may_have_rivals(hits, docs, RIVALRY)
    ranked = newer_first(hits, docs, vectors, RIVALRY)
    assert [h.id for h in ranked] == ["berlin", "lisbon", "jazz"]
    assert [h.score for h in ranked] == [0.800001, 0.80, 0.70]
    assert ranked[1].explain is not None and ranked[1].explain.below == "berlin"


def test_other_speakers_unlike_texts_and_far_scores_are_left_alone() -> None:
    vectors = {"old": NEAR, "new": NEAR}
    for docs, hits in (
        ({"old": doc("Maria", 2022), "new": doc("Tom", 2024)}, [hit("old", 0.8), hit("new", 0.7)]),
        (
            {"old": doc("Maria", 2022), "new": doc("Maria", 2024)},
            [hit("old", 0.8), hit("new", 0.5)],
        ),
        (
            {"old": doc("Maria", 2022), "new": doc("Maria", 2022)},
            [hit("old", 0.8), hit("new", 0.7)],
        ),
    ):
        assert [h.id for h in newer_first(hits, docs, vectors, RIVALRY)] == ["old", "new"]
    docs = {"old": doc("Maria", 2022), "new": doc("Maria", 2024)}
    unlike = {"old": NEAR, "new": OTHER}
    hits = [hit("old", 0.8), hit("new", 0.7)]
    assert [h.id for h in newer_first(hits, docs, unlike, RIVALRY)] == ["old", "new"]


def test_a_chain_of_statements_ends_newest_first_with_scores_in_order() -> None:
    years = {"a": 2020, "b": 2022, "c": 2024}
    docs = {m: doc("Maria", y) for m, y in years.items()}
    vectors = dict.fromkeys(years, NEAR)
    hits = [hit("a", 0.90), hit("b", 0.85), hit("c", 0.80)]
    ranked = newer_first(hits, docs, vectors, RIVALRY)
    assert [h.id for h in ranked] == ["c", "b", "a"]
    assert [h.score for h in ranked] == sorted((h.score for h in ranked), reverse=True)
