"""The second hop's seeding: which names of a question lead where, and what it asks for."""

from __future__ import annotations

import base64
import struct

import numpy as np

from pipeline.adapters.nlp.entities import extract_entities
from pipeline.serving.multihop import (
    QUERY_NAME,
    HopPlan,
    mixed,
    name_words,
    people_named,
    plan_hop,
    read_hop,
    said_by,
)
from pipeline.store.columns import RANK_FIELDS
from pipeline.store.queries import VECTOR_FIELDS


def names_in(question: str, limit: int = 2) -> list[frozenset[str]]:
    return people_named([e.text for e in extract_entities(question)], limit)


def test_the_people_a_question_names() -> None:
    assert names_in("What activities does Melanie partake in?") == [frozenset({"melanie"})]
    assert names_in("What do Melanie's kids like?") == [frozenset({"melanie"})]
    assert names_in("When did Maria Lopez meet Jon?") == [
        frozenset({"maria", "lopez"}),
        frozenset({"jon"}),
    ]
    assert names_in("what does she like?") == []


def test_a_date_is_nobody_and_the_limit_holds() -> None:
    assert people_named(["May 2023", "2023-05-07", "Maria", "maria", "Jon", "Gina"], 2) == [
        frozenset({"maria"}),
        frozenset({"jon"}),
    ]


def test_a_memory_said_by_a_named_person() -> None:
    maria = [name_words("Maria")]
    assert said_by("Maria", maria)
    assert said_by("maria_lopez", maria)  # the name is part of the speaker's
    assert said_by("Maria", [name_words("Maria Lopez")])  # the speaker is part of the name
    assert not said_by("Mariana", maria)
    assert not said_by("Jon", maria)
    assert not said_by(None, maria)
    assert not said_by("", maria)


def test_no_hop_for_a_question_that_names_nobody() -> None:
    assert plan_hop([], {"should": []}, people=2, size=20) is None
    assert plan_hop(["May 2023"], {"should": []}, people=2, size=20) is None


def test_the_hop_searches_what_the_named_people_said_with_the_fields_search_reads() -> None:
    question = {
        "should": [{"match": {"text": {"query": "Maria move"}}}],
        "minimum_should_match": 1,
        "filter": [{"term": {"user_id": "ignored"}}],
    }
    plan = plan_hop(["Maria"], question, people=2, size=20)
    assert isinstance(plan, HopPlan)
    scope = [{"term": {"user_id": "u1"}}]
    body = plan.search(scope)
    assert body["size"] == 20
    assert body["docvalue_fields"] == [*RANK_FIELDS, *VECTOR_FIELDS]  # columns, vector as bytes
    query = body["query"]["bool"]
    (must,) = query["must"]
    assert must["bool"]["_name"] == QUERY_NAME
    assert "filter" not in must["bool"]  # the scope comes from the caller's clauses only
    assert query["filter"][0] == scope[0]
    speakers = query["filter"][1]["bool"]["should"]
    assert speakers == [{"match": {"speaker": {"query": "maria", "operator": "and"}}}]
    assert "must_not" not in query  # it rides beside the first round: no pool to leave out
    assert body["_source"] is False  # ranking reads columns; the sources of the best come later


def test_the_hop_reads_each_new_memory_with_its_question_score() -> None:
    packed = base64.b64encode(struct.pack(">2f", 1.0, -0.5)).decode()
    columns = {"content_terms": ["maria move"], "mentions_time": [False]}
    hits = [
        {
            "_id": "n1",
            "fields": {**columns, "actor_id": ["maria"], "embedding": [packed]},
            "matched_queries": {QUERY_NAME: 2.5},
        },
        {"_id": "n2", "fields": columns, "matched_queries": {}},
        {"_id": "n3", "matched_queries": {QUERY_NAME: 1.0}},  # written before the columns
    ]
    result = read_hop(hits)
    assert result.docs["n2"] == {"content_terms": "maria move", "mentions_time": False}
    n1 = result.docs["n1"]
    assert n1["actor_id"] == "maria"
    assert n1["embedding"].dtype == np.float32  # native float32s, ready for the cosines
    assert n1["embedding"].tolist() == [1.0, -0.5]
    assert "n3" not in result.docs  # its source is read with the other unread candidates
    assert result.bm25 == {"n1": 2.5, "n2": 0.0, "n3": 1.0}


def test_the_hop_is_mixed_as_feedback_is() -> None:
    assert mixed(0.5, 1.0, 0.1) == (0.5 + 0.1) / 1.1
    assert mixed(0.5, 0.0, 0.0) == 0.5
