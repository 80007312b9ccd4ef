"""Repairing model replies into JSON, and reading the extraction reply's facts."""

from __future__ import annotations

import pytest

from pipeline.adapters.llm.parse import (
    MAX_FACT_CHARS,
    MAX_RAW_IN_ERROR_CHARS,
    FactOut,
    ParsedFacts,
    parse_facts,
    parse_json_object,
)
from pipeline.errors import PermanentError

EXPECTED = {"memory": [{"text": "Likes tea", "related": [0]}]}


@pytest.mark.parametrize(
    "raw",
    [
        '{"memory": [{"text": "Likes tea", "related": [0]}]}',
        '  \n{"memory": [{"text": "Likes tea", "related": [0]}]}\n',
        '```json\n{"memory": [{"text": "Likes tea", "related": [0]}]}\n```',
        '```\n{"memory": [{"text": "Likes tea", "related": [0]}]}\n```',
        'Here are the facts:\n```JSON\n{"memory": [{"text": "Likes tea", "related": [0]}]}```\nBye',
        'Sure! {"memory": [{"text": "Likes tea", "related": [0]}]} Hope that helps {:)}',
        '{"memory": [{"text": "Likes tea", "related": [0,],},],}',
        '{"memory": [{"text": "Likes tea", "related": [0 , ] } , ] ,\n}',
        "{'memory': [{'text': 'Likes tea', 'related': [0]}]}",
    ],
    ids=[
        "plain",
        "whitespace",
        "json-fence",
        "bare-fence",
        "fence-in-prose",
        "prose-around",
        "trailing-commas",
        "trailing-commas-spaced",
        "single-quotes",
    ],
)
def test_repairable_replies_give_the_object(raw: str) -> None:
    assert parse_json_object(raw) == EXPECTED


def test_braces_and_quotes_inside_strings_do_not_confuse_the_scan() -> None:
    raw = 'Result: {"text": "a } brace, a \\" quote, it\'s {fine}", "n": [1,]} trailing {'
    assert parse_json_object(raw) == {"text": "a } brace, a \" quote, it's {fine}", "n": [1]}


def test_commas_inside_strings_are_kept() -> None:
    assert parse_json_object('{"text": "a, }", "b": [",]",],}') == {"text": "a, }", "b": [",]"]}


def test_single_quoted_strings_may_hold_double_quotes() -> None:
    assert parse_json_object("{'text': 'say \"hi\"'}") == {"text": 'say "hi"'}


def test_prose_braces_before_the_object_are_skipped() -> None:
    raw = 'I used {curly} braces, then: {"memory": []}'
    assert parse_json_object(raw) == {"memory": []}


@pytest.mark.parametrize(
    "raw",
    ["", "no json here", "[1, 2, 3]", '"just a string"', '{"memory": [', "{'it's': 'broken'}"],
)
def test_unusable_replies_are_permanent_errors_carrying_the_reply(raw: str) -> None:
    with pytest.raises(PermanentError) as caught:
        parse_json_object(raw)
    assert repr(raw) in caught.value.reason


def test_the_reply_in_the_error_is_truncated() -> None:
    raw = "x" * 10_000
    with pytest.raises(PermanentError) as caught:
        parse_json_object(raw)
    reason = caught.value.reason
    assert "x" * MAX_RAW_IN_ERROR_CHARS in reason
    assert "x" * (MAX_RAW_IN_ERROR_CHARS + 1) not in reason
    assert "10000 chars" in reason


def test_facts_are_read_with_attribution_and_related_ids() -> None:
    raw = """{"memory": [
        {"text": "The user lives in Lyon", "attributed_to": "user", "related": [1, 0, 1]},
        {"text": "The assistant is called Max", "attributed_to": "assistant"}
    ]}"""
    assert parse_facts(raw, known_ids=3) == ParsedFacts(
        facts=[
            FactOut("The user lives in Lyon", "user", (1, 0)),
            FactOut("The assistant is called Max", "assistant", ()),
        ],
        unknown_ids=[],
    )


def test_facts_key_and_plain_string_items_are_accepted() -> None:
    parsed = parse_facts('{"facts": ["Likes tea", "  Has a cat  "]}', known_ids=0)
    assert parsed.facts == [FactOut("Likes tea", "user"), FactOut("Has a cat", "user")]


def test_empty_and_textless_items_are_skipped() -> None:
    raw = '{"memory": ["", "   ", {"text": ""}, {"text": 42}, {"nope": 1}, 7, null, "Kept"]}'
    assert parse_facts(raw, known_ids=0).facts == [FactOut("Kept", "user")]


def test_long_texts_are_truncated() -> None:
    raw = '{"memory": ["' + "a" * (MAX_FACT_CHARS + 500) + '"]}'
    (fact,) = parse_facts(raw, known_ids=0).facts
    assert fact.text == "a" * MAX_FACT_CHARS


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ('"user"', "user"),
        ('"Assistant"', "assistant"),
        ('"agent"', "assistant"),
        ('"system"', "user"),
        ("null", "user"),
        ("3", "user"),
    ],
)
def test_attribution_defaults_to_user(given: str, expected: str) -> None:
    raw = f'{{"memory": [{{"text": "A fact", "attributed_to": {given}}}]}}'
    assert parse_facts(raw, known_ids=0).facts[0].attributed_to == expected


def test_missing_attribution_is_user() -> None:
    assert parse_facts('{"memory": [{"text": "A fact"}]}', known_ids=0).facts[0].attributed_to == (
        "user"
    )


def test_out_of_range_related_ids_are_dropped_and_reported() -> None:
    raw = '{"memory": [{"text": "A", "related": [0, 2, 9, -1, "1", true, "x", 2.5]}]}'
    parsed = parse_facts(raw, known_ids=3)
    assert parsed.facts == [FactOut("A", "user", (0, 2, 1))]
    assert parsed.unknown_ids == [9, -1]


def test_related_that_is_not_a_list_is_ignored() -> None:
    parsed = parse_facts('{"memory": [{"text": "A", "related": 3}]}', known_ids=5)
    assert parsed == ParsedFacts([FactOut("A", "user", ())], [])


def test_an_empty_memory_list_is_a_valid_result() -> None:
    assert parse_facts('{"memory": []}', known_ids=10) == ParsedFacts([], [])


def test_a_fenced_reply_with_trailing_commas_gives_facts() -> None:
    raw = 'Facts:\n```json\n{"memory": [{"text": "Likes tea", "related": [0],},]}\n```'
    assert parse_facts(raw, known_ids=1).facts == [FactOut("Likes tea", "user", (0,))]


@pytest.mark.parametrize("raw", ['{"foo": 1}', '{"memory": "Likes tea"}', '{"memory": null}'])
def test_json_without_a_usable_list_is_permanent_with_the_reply(raw: str) -> None:
    with pytest.raises(PermanentError, match="no 'memory' list") as caught:
        parse_facts(raw, known_ids=0)
    assert repr(raw) in caught.value.reason


def test_unparseable_extraction_reply_is_permanent() -> None:
    with pytest.raises(PermanentError, match="no JSON object"):
        parse_facts("I could not find any facts, sorry.", known_ids=0)
