"""The filter language's translation into Elasticsearch DSL, and every validation error."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest

from pipeline.errors import InvalidInputError
from pipeline.store.filters import (
    MAX_DEPTH,
    MAX_LEAVES,
    MAX_LIST_VALUES,
    MAX_SUBSTRING_CHARS,
    ScopeSplit,
    metadata_pairs,
    search_slots,
    split_scope,
    substring_terms,
    translate_filters,
)

JAN = "2024-01-01T00:00:00.000+00:00"


def _error(filters: Any) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as caught:
        translate_filters(filters)
    return caught.value


def _not_nested(levels: int) -> dict[str, Any]:
    """A chain of ``levels`` filter objects: NOT inside NOT ... around one leaf."""
    node: dict[str, Any] = {"user_id": "u"}
    for _ in range(levels - 1):
        node = {"NOT": node}
    return node


# -- translation -----------------------------------------------------------------------------


@pytest.mark.parametrize("empty", [None, {}])
def test_no_filter_is_no_clause(empty: dict[str, Any] | None) -> None:
    assert translate_filters(empty) == []


def test_bare_value_is_equality_and_fields_are_anded() -> None:
    assert translate_filters({"user_id": "u1", "role": "user"}) == [
        {"term": {"user_id": "u1"}},
        {"term": {"role": "user"}},
    ]


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ({"eq": "a"}, {"term": {"agent_id": "a"}}),
        ({"ne": "a"}, {"bool": {"must_not": [{"term": {"agent_id": "a"}}]}}),
        ({"in": ["a", "b"]}, {"terms": {"agent_id": ["a", "b"]}}),
        ({"nin": ["a"]}, {"bool": {"must_not": [{"terms": {"agent_id": ["a"]}}]}}),
        ({"gt": "m"}, {"range": {"agent_id": {"gt": "m"}}}),
        ({"gte": "m"}, {"range": {"agent_id": {"gte": "m"}}}),
        ({"lt": "m"}, {"range": {"agent_id": {"lt": "m"}}}),
        ({"lte": "m"}, {"range": {"agent_id": {"lte": "m"}}}),
        (
            {"contains": "bot"},
            {"prefix": {"substrings.agent_id": {"value": "bot", "case_insensitive": False}}},
        ),
        (
            {"icontains": "Bot"},
            {"prefix": {"substrings.agent_id": {"value": "Bot", "case_insensitive": True}}},
        ),
        ("*", {"exists": {"field": "agent_id"}}),
    ],
)
def test_each_operator_on_a_keyword_field(condition: Any, expected: dict[str, Any]) -> None:
    assert translate_filters({"agent_id": condition}) == [expected]


def test_several_operators_on_one_field_are_anded() -> None:
    assert translate_filters({"created_at": {"gte": "2024-01-01", "lt": "2024-02-01"}}) == [
        {"range": {"created_at": {"gte": JAN}}},
        {"range": {"created_at": {"lt": "2024-02-01T00:00:00.000+00:00"}}},
    ]


@pytest.mark.parametrize(
    "value",
    [
        "2024-01-01",
        "2024-01-01T00:00:00",
        "2024-01-01T00:00:00Z",
        "2024-01-01T01:00:00+01:00",
        datetime(2024, 1, 1),
        datetime(2024, 1, 1, tzinfo=UTC),
        datetime(2023, 12, 31, 19, tzinfo=timezone(timedelta(hours=-5))),
        date(2024, 1, 1),
    ],
)
def test_dates_are_normalized_to_utc(value: Any) -> None:
    assert translate_filters({"observed_at": value}) == [{"term": {"observed_at": JAN}}]


def test_date_lists_are_normalized_item_by_item() -> None:
    assert translate_filters({"expiration_date": {"nin": ["2024-01-01"]}}) == [
        {"bool": {"must_not": [{"terms": {"expiration_date": [JAN]}}]}}
    ]


@pytest.mark.parametrize("op", ["contains", "icontains"])
def test_text_contains_is_a_phrase_match(op: str) -> None:
    assert translate_filters({"text": {op: "likes tea"}}) == [
        {"match_phrase": {"text": {"query": "likes tea"}}}
    ]


def test_text_exists() -> None:
    assert translate_filters({"text": "*"}) == [{"exists": {"field": "text"}}]


def test_contains_on_a_keyword_is_a_prefix_of_its_substrings() -> None:
    assert translate_filters({"hash": {"contains": "a*b?c\\d"}}) == [
        {"prefix": {"substrings.hash": {"value": "a*b?c\\d", "case_insensitive": False}}}
    ]


def test_substrings_are_every_suffix_cut_to_the_longest_operand() -> None:
    terms = substring_terms({"agent_id": "travel-bot", "text": "not a keyword"})
    assert terms == {"agent_id": sorted("travel-bot"[i:] for i in range(10))}
    long_id = "x" * 30 + "y" * 30
    cuts = substring_terms({"run_id": long_id})["run_id"]
    assert max(map(len, cuts)) == MAX_SUBSTRING_CHARS
    assert all(long_id[i : i + MAX_SUBSTRING_CHARS] in cuts for i in range(60))


def test_substrings_of_metadata_follow_what_elasticsearch_indexes() -> None:
    terms = substring_terms({"metadata": {"a": {"b": "xyz"}, "long": "v" * 1100}})
    assert terms["metadata_kv"] == ["a.b=xyz", "a.b=yz", "a.b=z"]
    assert terms["metadata"] == ["xyz", "yz", "z"]  # the long value is not indexed


def test_a_long_substring_on_a_keyword_is_refused() -> None:
    operand = "a" * (MAX_SUBSTRING_CHARS + 1)
    error = _error({"agent_id": {"contains": operand}})
    assert error.field == "agent_id.contains"
    assert f"at most {MAX_SUBSTRING_CHARS}" in error.reason
    assert translate_filters({"text": {"contains": operand}})


def test_list_values_are_counted_across_the_filter() -> None:
    lists = [{"hash": {"nin": [f"h{i}-{n}" for i in range(1024)]}} for n in range(2)]
    assert translate_filters({"AND": lists})
    error = _error({"AND": [*lists, {"role": {"in": ["user"]}}]})
    assert error.field == "AND.2.role.in"
    assert f"more than {MAX_LIST_VALUES} values" in error.reason


def test_unknown_names_are_metadata_keys() -> None:
    assert translate_filters({"category": "food"}) == [{"term": {"metadata.category": "food"}}]


def test_dotted_metadata_paths_reach_nested_keys() -> None:
    assert translate_filters({"metadata.place.city": "Paris", "metadata.tag": "*"}) == [
        {"term": {"metadata.place.city": "Paris"}},
        {"exists": {"field": "metadata.tag"}},
    ]


@pytest.mark.parametrize(
    ("value", "indexed"), [(10, "10"), (1.5, "1.5"), (True, "true"), (False, "false")]
)
def test_metadata_values_compare_as_the_strings_flattened_indexes(value: Any, indexed: str) -> None:
    assert translate_filters({"score": value}) == [{"term": {"metadata.score": indexed}}]
    assert translate_filters({"score": {"in": [value, "x"]}}) == [
        {"terms": {"metadata.score": [indexed, "x"]}}
    ]


def test_metadata_ranges_compare_strings() -> None:
    assert translate_filters({"metadata.rank": {"gte": 5, "lt": "9"}}) == [
        {"range": {"metadata.rank": {"gte": "5"}}},
        {"range": {"metadata.rank": {"lt": "9"}}},
    ]


def test_contains_on_a_metadata_key_uses_the_key_value_pairs() -> None:
    assert translate_filters({"category": {"contains": "foo*"}}) == [
        {
            "prefix": {
                "substrings.metadata_kv": {"value": "category=foo*", "case_insensitive": False}
            }
        }
    ]
    assert translate_filters({"metadata.a.b": {"icontains": "Foo"}}) == [
        {"prefix": {"substrings.metadata_kv": {"value": "a.b=Foo", "case_insensitive": True}}}
    ]


def test_metadata_pairs_flatten_nested_keys_lists_and_scalars() -> None:
    pairs = metadata_pairs({"a": {"b": "x", "c": [1, True]}, "d": None, "e": 2.5})
    assert sorted(pairs) == ["a.b=x", "a.c=1", "a.c=true", "e=2.5"]


def test_contains_on_the_metadata_root_matches_any_value() -> None:
    assert translate_filters({"metadata": {"icontains": "Tea"}}) == [
        {"prefix": {"substrings.metadata": {"value": "Tea", "case_insensitive": True}}}
    ]


def test_and_or_not_nest() -> None:
    filters = {
        "OR": [
            {"AND": [{"user_id": "u"}, {"role": {"ne": "tool"}}]},
            {"NOT": {"category": "food", "language": "en"}},
        ]
    }
    assert translate_filters(filters) == [
        {
            "bool": {
                "should": [
                    {
                        "bool": {
                            "filter": [
                                {"term": {"user_id": "u"}},
                                {"bool": {"must_not": [{"term": {"role": "tool"}}]}},
                            ]
                        }
                    },
                    {
                        "bool": {
                            "must_not": [
                                {
                                    "bool": {
                                        "filter": [
                                            {"term": {"metadata.category": "food"}},
                                            {"term": {"language": "en"}},
                                        ]
                                    }
                                }
                            ]
                        }
                    },
                ],
                "minimum_should_match": 1,
            }
        }
    ]


def test_not_of_a_list_is_none_of_them() -> None:
    assert translate_filters({"NOT": [{"role": "user"}, {"role": "tool"}]}) == [
        {"bool": {"must_not": [{"term": {"role": "user"}}, {"term": {"role": "tool"}}]}}
    ]


@pytest.mark.parametrize(("alias", "upper"), [("and", "AND"), ("or", "OR"), ("not", "NOT")])
def test_lower_case_logical_keys_are_aliases(alias: str, upper: str) -> None:
    operand = [{"role": "user"}]
    assert translate_filters({alias: operand}) == translate_filters({upper: operand})


def test_logical_keys_are_case_sensitive() -> None:
    assert translate_filters({"And": "x"}) == [{"term": {"metadata.And": "x"}}]


def test_fields_and_logical_nodes_mix_in_one_object() -> None:
    assert translate_filters({"user_id": "u", "OR": [{"role": "user"}]}) == [
        {"term": {"user_id": "u"}},
        {"bool": {"should": [{"term": {"role": "user"}}], "minimum_should_match": 1}},
    ]


def test_the_limits_themselves_are_allowed() -> None:
    assert translate_filters(_not_nested(MAX_DEPTH))
    leaves = {"AND": [{"role": str(i)} for i in range(MAX_LEAVES)]}
    assert len(translate_filters(leaves)[0]["bool"]["filter"]) == MAX_LEAVES
    assert translate_filters({"role": {"in": ["r"] * 1024}})


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filters", "field", "words"),
    [
        ({"age": {"between": 1}}, "age.between", "unknown operator 'between'"),
        ({"OR": [{"a": 1}, {"b": {"like": "x"}}]}, "OR.1.b.like", "unknown operator"),
        ({"age": {}}, "age", "no operator"),
        ({"created_at": {"gte": ["2024-01-01"]}}, "created_at.gte", "single value"),
        ({"role": {"lt": ["a"]}}, "role.lt", "single value"),
        ({"rank": {"gt": True}}, "rank.gt", "boolean"),
        ({"role": {"in": "user"}}, "role.in", "list"),
        ({"role": {"nin": []}}, "role.nin", "between 1 and 1024"),
        ({"role": {"in": ["r"] * 1025}}, "role.in", "between 1 and 1024"),
        ({"role": {"in": ["a", ["b"]]}}, "role.in.1", "single value"),
        ({"role": {"in": ["a", None]}}, "role.in.1", "null"),
        ({"role": ["a", "b"]}, "role", "single value"),
        ({"role": {"eq": {"x": 1}}}, "role.eq", "single value"),
        ({"role": None}, "role", "null"),
        ({"role": date(2024, 1, 1)}, "role", "date fields"),
        ({"created_at": "yesterday"}, "created_at", "ISO-8601"),
        ({"created_at": {"lt": "2024-13-01"}}, "created_at.lt", "ISO-8601"),
        ({"created_at": 1700000000}, "created_at", "ISO-8601"),
        ({"created_at": {"in": ["2024-01-01", "soon"]}}, "created_at.in.1", "ISO-8601"),
        ({"created_at": {"contains": "2024"}}, "created_at.contains", "date field"),
        ({"text": "hello"}, "text", "operator eq is not allowed on a text field"),
        ({"text": {"gt": "a"}}, "text.gt", "text field"),
    ],
)
def test_wrong_operators_and_values_are_refused(
    filters: dict[str, Any], field: str, words: str
) -> None:
    error = _error(filters)
    assert error.field == field
    assert words in error.reason
    assert field.split(".", maxsplit=1)[0] in error.reason


@pytest.mark.parametrize(
    "value", ["^start", "end$", "[ab]", "(x)", "a{2}", "a|b", "a+", "a.*b", ""]
)
def test_regex_looking_or_empty_contains_is_refused(value: str) -> None:
    error = _error({"role": {"contains": value}})
    assert error.field == "role.contains"
    assert ("regular expression" in error.reason) or ("non-empty" in error.reason)


def test_contains_needs_a_short_string() -> None:
    assert _error({"text": {"contains": "a" * 257}}).field == "text.contains"
    assert translate_filters({"text": {"contains": "a" * 256}})
    assert "non-empty string" in _error({"role": {"icontains": 3}}).reason


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"AND": []}, "AND"),
        ({"OR": []}, "OR"),
        ({"or": {"role": "user"}}, "or"),
        ({"NOT": []}, "NOT"),
        ({"NOT": None}, "NOT"),
        ({"NOT": {}}, "NOT"),
        ({"AND": [{}]}, "AND.0"),
        ({"AND": [{"role": "user"}, "role"]}, "AND.1"),
        ({"OR": [{"NOT": [{"role": "a"}, 3]}]}, "OR.0.NOT.1"),
    ],
)
def test_malformed_logical_nodes_are_refused(filters: dict[str, Any], field: str) -> None:
    error = _error(filters)
    assert error.field == field
    assert field in error.reason


def test_a_non_object_filter_is_refused() -> None:
    error = _error(["role", "user"])
    assert error.field is None
    assert "must be an object" in error.reason


def test_depth_beyond_the_limit_is_refused() -> None:
    error = _error(_not_nested(MAX_DEPTH + 1))
    assert error.field == ".".join(["NOT"] * MAX_DEPTH)
    assert f"deeper than {MAX_DEPTH}" in error.reason


def test_too_many_leaves_are_refused() -> None:
    error = _error({"OR": [{"role": {"gte": "a", "lte": "z"}} for _ in range(MAX_LEAVES // 2 + 1)]})
    assert error.field == f"OR.{MAX_LEAVES // 2}.role.gte"
    assert str(MAX_LEAVES) in error.reason


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("", "non-empty"),
        ("_id", "'_'"),
        ("my key", "whitespace"),
        ("tab\tkey", "whitespace"),
        ("cat*", "'*'"),
        ("metadata.", "empty path segment"),
        ("metadata..a", "empty path segment"),
        ("tenant", "caller's key"),
        ("embedding", "cannot filter"),
        ("text_lemmatized", "cannot filter"),
    ],
)
def test_bad_field_names_are_refused(name: str, words: str) -> None:
    error = _error({"AND": [{"role": "user"}, {name: "x"}]})
    assert error.field == f"AND.1.{name}"
    assert words in error.reason


def test_non_string_field_names_are_refused() -> None:
    error = _error({3: "x"})
    assert error.field == "3"


def test_the_scope_is_taken_from_equalities_only_and_every_other_condition_stays() -> None:
    split = split_scope(
        {
            "AND": [{"agent_id": "helper"}, {"user_id": {"ne": "alice"}}],
            "NOT": {"run_id": "r1"},
            "user_id": "*",
        }
    )
    assert split.ids == {"agent_id": "helper"}
    assert split.rest == {
        "NOT": {"run_id": "r1"},
        "user_id": "*",
        "AND": [{"user_id": {"ne": "alice"}}],
    }
    assert split_scope({"user_id": "a", "AND": [{"user_id": "a"}]}) == ScopeSplit(
        {"user_id": "a"}, None
    )


def test_two_values_for_one_scope_id_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="two different user_id") as caught:
        split_scope({"user_id": "a", "and": [{"user_id": "b"}]})
    assert caught.value.field == "and.0.user_id"


def test_a_search_takes_slots_by_what_its_filter_costs() -> None:
    lists = [{"hash": {"nin": [f"h{i}-{n}" for i in range(1024)]}} for n in range(2)]
    scans = {"OR": [{f: {"icontains": "abc"}} for f in ("agent_id", "run_id")]}
    assert search_slots(None) == search_slots({"role": {"in": ["user", "assistant"]}}) == 1
    assert search_slots(scans) == 2
    assert search_slots({"AND": [scans, *lists]}) == 4
    assert search_slots({"agent_id": {"contains": "a"}}) == 1  # refused by the search itself
