"""The API's readers of odd input: the bounded ``filters`` parameter parser and the check for
text that is not Unicode (a lone surrogate). Both answer ``InvalidInputError`` (422), never a
parser's own exception."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.body import lone_surrogate_at, refuse_lone_surrogates
from api.convert import (
    FILTERS_MAX_CHARS,
    FILTERS_MAX_DEPTH,
    LITERAL_MAX_CHARS,
    filters_param,
    nesting_depth,
)
from pipeline.errors import InvalidInputError


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ('{"a": 1}', 1),
        ('{"a": [{"b": (1,)}]}', 4),
        ('{"a": "[[[[{{"}', 1),
        ("{'a': '[[\\'[[' }", 1),
        ('{"a": "\\"[["}', 1),
        ("]]][[", 2),
        ('"unterminated [[[', 3),
    ],
)
def test_nesting_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


@pytest.mark.parametrize(
    "raw",
    ['{"user_id": "u"}', "{'user_id': 'u'}", "{'AND': [{'user_id': 'u'}, {'x': (1, 2)}]}"],
)
def test_json_and_python_literals_are_read(raw: str) -> None:
    value = filters_param(raw, literals=True)
    assert isinstance(value, dict) and value.get("user_id", "u") == "u"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{{}}", "neither JSON nor"),
        ("{[]}", "neither JSON nor"),
        ("__import__('os').system('true')", "neither JSON nor"),
        ("-" * (LITERAL_MAX_CHARS - 1) + "1", "neither JSON nor"),
        ("1" + "+1" * LITERAL_MAX_CHARS, f"up to {LITERAL_MAX_CHARS} characters"),
        ("[" * (FILTERS_MAX_DEPTH + 1), f"deeper than {FILTERS_MAX_DEPTH} levels"),
        ("{'a': " * 5_000 + "1" + "}" * 5_000, f"longer than {FILTERS_MAX_CHARS}"),
        ("[" * 9_000 + "]" * 900, f"deeper than {FILTERS_MAX_DEPTH} levels"),
    ],
    ids=lambda value: value[:12] if isinstance(value, str) else None,
)
def test_odd_filters_are_refused_naming_the_limit(raw: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says) as raised:
        filters_param(raw, literals=True)
    assert raised.value.field == "filters"


def test_json_only_refuses_a_literal() -> None:
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        filters_param("{'user_id': 'u'}")
    assert filters_param(json.dumps({"AND": [{"a": 1}] * 100})) == {"AND": [{"a": 1}] * 100}


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ("fine \U0001f600", None),
        ({"messages": [{"content": "caf\ud800"}]}, "messages.0.content"),
        ({"metadata": {"\udc00": 1}}, "metadata"),
        ({"a": {"b": ["ok", "\udfff"]}}, "a.b.1"),
        ("\ud800", ""),
        ([{"k": 1}, 2, None, "\ud83d"], "3"),
    ],
)
def test_a_lone_surrogate_is_found_with_its_path(value: Any, where: str | None) -> None:
    assert lone_surrogate_at(value) == where


def test_a_lone_surrogate_is_found_at_any_depth() -> None:
    node: Any = "\ud800"
    for _ in range(10_000):
        node = {"k": node}
    assert lone_surrogate_at(node) == ".".join(["k"] * 10_000)
    with pytest.raises(InvalidInputError, match="surrogate"):
        refuse_lone_surrogates({"text": "x\ud800"})
