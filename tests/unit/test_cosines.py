"""The candidates' similarity to the query (``pipeline.serving.fusion.cosines``), computed in
one matrix product over the vectors read as float32 arrays."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.errors import EmbedderChangedError
from pipeline.serving.fusion import cosines


def one_by_one(query: list[float], other: list[float]) -> float:
    q, o = np.asarray(query, np.float64), np.asarray(other, np.float64)
    return max(0.0, float(q @ o / (np.linalg.norm(q) * np.linalg.norm(o))))


def test_each_cosine_is_the_one_computed_alone() -> None:
    rng = np.random.default_rng(7)
    query = rng.normal(size=384).tolist()
    others = [rng.normal(size=384).astype(np.float32) for _ in range(30)]
    others.append(np.asarray(query, np.float32))  # the query itself: 1
    got = cosines(query, others)
    assert got == pytest.approx([one_by_one(query, o.tolist()) for o in others], abs=1e-5)
    assert got[-1] == pytest.approx(1.0, abs=1e-6)


def test_a_missing_vector_scores_zero_and_a_lists_works_as_an_array() -> None:
    query = [1.0, 0.0, 0.0]
    got = cosines(query, [None, [0.0, 2.0, 0.0], np.array([3.0, 0.0, 0.0], np.float32), []])
    assert got == [0.0, 0.0, 1.0, 0.0]


def test_an_opposite_vector_is_clipped_at_zero() -> None:
    assert cosines([1.0, 1.0], [np.array([-1.0, -1.0], np.float32)]) == [0.0]


def test_nothing_to_compare_is_nothing() -> None:
    assert cosines([1.0, 0.0], []) == []
    assert cosines([1.0, 0.0], [None, None]) == [0.0, 0.0]


def test_a_vector_of_another_size_says_the_embedder_changed() -> None:
    with pytest.raises(EmbedderChangedError):
        cosines([1.0, 0.0, 0.0], [np.zeros(2, np.float32) + 1])
