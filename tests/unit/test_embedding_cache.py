"""The entity-name cache in front of an embedder: one model call for the distinct texts it
does not hold, none when it holds them all, the model's own vectors, the oldest out first."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.adapters.embedding.cache import CachedEmbedder
from pipeline.errors import TransientError
from tests.doubles import HashEmbedder


def float32(vectors: list[list[float]]) -> list[list[float]]:
    return np.asarray(vectors, dtype=np.float32).tolist()


def test_a_batch_embeds_each_distinct_new_text_once_and_keeps_the_order() -> None:
    model = HashEmbedder()
    cached = CachedEmbedder(model, size=100)
    texts = ["Maria", "Lisbon", "Maria", "jazz"]
    vectors = cached.embed(texts)
    assert model.calls == [["Maria", "Lisbon", "jazz"]]
    assert vectors == float32(HashEmbedder().embed(texts))
    assert cached.dims == model.dims


def test_held_names_cost_no_model_call_and_only_new_ones_are_embedded() -> None:
    model = HashEmbedder()
    cached = CachedEmbedder(model, size=100)
    first = cached.embed(["Maria", "Lisbon"])
    assert cached.embed(["Lisbon", "Maria"]) == [first[1], first[0]]
    assert cached.embed(["Maria", "Porto"])[1] == float32(HashEmbedder().embed(["Porto"]))[0]
    assert model.calls == [["Maria", "Lisbon"], ["Porto"]]


def test_the_least_recently_used_name_goes_first() -> None:
    model = HashEmbedder()
    cached = CachedEmbedder(model, size=2)
    cached.embed(["a", "b"])
    cached.embed(["a"])  # "a" is used again: "b" is now the oldest
    cached.embed(["c"])
    cached.embed(["a", "b"])
    assert model.calls == [["a", "b"], ["c"], ["b"]]


def test_a_refused_call_raises_and_keeps_nothing() -> None:
    model = HashEmbedder(fail_on=lambda texts: "poison" in texts)
    cached = CachedEmbedder(model, size=10)
    with pytest.raises(TransientError):
        cached.embed(["Maria", "poison"])
    cached.embed(["Maria"])
    assert model.calls == [["Maria", "poison"], ["Maria"]]
