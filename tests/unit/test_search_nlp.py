"""The language side of search: time expressions, the speaker, pseudo-relevance feedback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipeline.adapters.nlp.feedback import content_terms, expansion_of, share_of
from pipeline.adapters.nlp.speaker import embedding_text, speaker_name, speaker_of
from pipeline.adapters.nlp.timeexpr import Period, asks_when, closeness, mentions_time, periods
from pipeline.domain.models import Fact, Scope

REFERENCE = datetime(2023, 10, 18, 15, 30, tzinfo=UTC)  # a Wednesday


def named(text: str) -> list[tuple[str, str, str]]:
    found = periods(text, REFERENCE)
    return [(p.text, p.start.date().isoformat(), p.end.date().isoformat()) for p in found]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did Maria do in May 2023?", [("May 2023", "2023-05-01", "2023-06-01")]),
        ("plans for December, 2022", [("December, 2022", "2022-12-01", "2023-01-01")]),
        ("on 7 May 2023", [("7 May 2023", "2023-05-07", "2023-05-08")]),
        ("June 5th, 2023", [("June 5th, 2023", "2023-06-05", "2023-06-06")]),
        ("the 2023-05-07 meeting", [("2023-05-07", "2023-05-07", "2023-05-08")]),
        ("on 7 May", [("7 May", "2023-05-07", "2023-05-08")]),
        # a day or month without a year: its latest occurrence not after the reference
        ("on December 2", [("December 2", "2022-12-02", "2022-12-03")]),
        ("camping in June?", [("in June", "2023-06-01", "2023-07-01")]),
        ("What happened in November", [("in November", "2022-11-01", "2022-12-01")]),
        ("trips in 2022", [("2022", "2022-01-01", "2023-01-01")]),
        ("yesterday", [("yesterday", "2023-10-17", "2023-10-18")]),
        ("today", [("today", "2023-10-18", "2023-10-19")]),
        ("what did I eat last week", [("last week", "2023-10-09", "2023-10-16")]),
        ("this week", [("this week", "2023-10-16", "2023-10-23")]),
        ("last weekend", [("last weekend", "2023-10-14", "2023-10-16")]),
        ("last month", [("last month", "2023-09-01", "2023-10-01")]),
        ("next month", [("next month", "2023-11-01", "2023-12-01")]),
        ("last year", [("last year", "2022-01-01", "2023-01-01")]),
        ("3 days ago", [("3 days ago", "2023-10-15", "2023-10-16")]),
        ("two weeks ago", [("two weeks ago", "2023-10-02", "2023-10-09")]),
        ("last Friday", [("last Friday", "2023-10-13", "2023-10-14")]),
        ("on Wednesday", [("on Wednesday", "2023-10-11", "2023-10-12")]),
        # the most specific reading wins; no period is read twice
        (
            "in May 2023 and in 2021",
            [("May 2023", "2023-05-01", "2023-06-01"), ("2021", "2021-01-01", "2022-01-01")],
        ),
    ],
)
def test_periods_of_time_expressions(query: str, expected: list[tuple[str, str, str]]) -> None:
    assert named(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "May I ask what Maria likes?",  # a verb, not a month
        "What does Jon like to cook?",
        "He said it at 9:30",
        "Room 101 was booked",  # not a year
    ],
)
def test_no_period_where_there_is_no_time(query: str) -> None:
    assert periods(query, REFERENCE) == []


def test_an_impossible_date_names_no_day() -> None:
    assert [p.text for p in periods("on 31 June 2023", REFERENCE)] == ["June 2023"]


def test_a_reference_at_the_edge_of_the_calendar_names_nothing_out_of_range() -> None:
    first = datetime(1, 1, 1, tzinfo=UTC)
    assert periods("yesterday, last year and 3 days ago", first) == []
    last = datetime(9999, 12, 31, tzinfo=UTC)
    assert [p.text for p in periods("next month, next year", last)] == []


def test_periods_keep_the_reference_time_zone() -> None:
    paris = REFERENCE.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Paris"))
    (period,) = periods("yesterday", paris)
    assert period.start.tzinfo == paris.tzinfo and period.start.hour == 0


@pytest.mark.parametrize(
    ("query", "when"),
    [
        ("When did Caroline go to the support group?", True),
        ("when is Maria's birthday", True),
        ("How long ago was Caroline's 18th birthday?", True),
        ("How long has Melanie been practicing art?", True),
        ("What year did Jon move?", True),
        ("In what month did Gina open the store?", True),
        ("What did Caroline research?", False),
        ("Where did Maria say she'd go when it rains?", False),
    ],
)
def test_questions_that_ask_for_a_time(query: str, when: bool) -> None:
    assert asks_when(query) is when


@pytest.mark.parametrize(
    ("text", "dated"),
    [
        ("I went to a support group yesterday.", True),
        ("Last Friday I finally finished the bowl.", True),
        ("We had a blast last year at the Pride fest.", True),
        ("Got the tattoo a few years ago.", True),
        ("I'm going to a conference this month.", True),
        ("The official opening night is tomorrow.", True),
        ("I painted that in 2022.", True),
        ("The transgender stories were so inspiring!", False),
        ("Thanks, Mel! You're the best.", False),
    ],
)
def test_texts_that_carry_a_time(text: str, dated: bool) -> None:
    assert mentions_time(text) is dated


def test_closeness_is_one_inside_and_halves_with_each_period_length_away() -> None:
    may = Period("May 2023", datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC))
    assert closeness(datetime(2023, 5, 15, tzinfo=UTC), [may]) == 1.0
    assert closeness(datetime(2023, 6, 1, tzinfo=UTC) + timedelta(days=31), [may]) == 0.5
    assert closeness(datetime(2023, 4, 1, tzinfo=UTC) - timedelta(days=31), [may]) < 0.5
    assert closeness(None, [may]) == 0.0
    assert closeness(datetime(2023, 5, 15, tzinfo=UTC), []) == 0.0
    day = Period("yesterday", datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 5, 2, tzinfo=UTC))
    assert closeness(datetime(2023, 5, 9, tzinfo=UTC), [day]) == 0.5  # at least a week's scale


# -- the speaker ------------------------------------------------------------------------------


def test_an_actor_id_reads_as_a_name() -> None:
    assert speaker_name("maria_lopez") == "maria lopez"
    assert speaker_name("Jon") == "Jon"
    assert speaker_name("___") is None
    assert speaker_name(None) is None


def test_the_speaker_of_a_fact() -> None:
    scope = Scope(user_id="u1", agent_id="travel-agent")
    assert speaker_of(Fact(text="hi", actor_id="Maria"), scope) == "Maria"
    assert speaker_of(Fact(text="hi", role="assistant", attributed_to="assistant"), scope) == (
        "travel agent"
    )
    assert speaker_of(Fact(text="hi"), scope) is None
    assert speaker_of(Fact(text="hi", role="assistant"), Scope(user_id="u1")) is None


def test_the_embedded_text_puts_the_speaker_first() -> None:
    assert embedding_text("I adopted a dog", "Maria") == "Maria: I adopted a dog"
    assert embedding_text("I adopted a dog", None) == "I adopted a dog"


# -- feedback ---------------------------------------------------------------------------------


def test_expansion_terms_are_what_the_seeds_share_beyond_the_query() -> None:
    seeds = ["I run far to de-stress", "pottery be my way to de-stress, run too"]
    terms = expansion_of([content_terms(s) for s in seeds], "what do Melanie do to de-stress", 3)
    assert terms == ["run", "far", "pottery"]  # shared first, then in order of appearance
    assert expansion_of([], "anything", 5) == []


def test_feedback_is_the_share_of_terms_mentioned() -> None:
    def feedback(lemmatized: str, terms: list[str]) -> float:
        return share_of(frozenset(content_terms(lemmatized)), terms)

    assert feedback("she love pottery and run", ["run", "pottery", "swim", "paint"]) == 0.5
    assert feedback("The Pottery class", ["pottery"]) == 1.0
    assert feedback("anything", []) == 0.0
