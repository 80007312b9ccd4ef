"""The public score: the similarity scale (``pipeline.serving.fusion.on_similarity_scale``)."""

from __future__ import annotations

from pipeline.serving.fusion import on_similarity_scale
from pipeline.serving.search_models import Explain, SearchHit


def hit(memory: str, fused: float, semantic: float, reply_to: str | None = None) -> SearchHit:
    explain = Explain(
        semantic=semantic, bm25=0, bm25_raw=0, entity=0, fused=fused, reply_to=reply_to
    )
    return SearchHit(id=memory, memory=memory, score=fused, explain=explain)


def scored(hits: list[SearchHit]) -> list[tuple[str, float]]:
    on_similarity_scale(hits)
    return [(h.id, h.score) for h in hits]


def test_a_ranking_that_agrees_with_similarity_scores_each_hit_by_its_own() -> None:
    assert scored([hit("a", 0.4, 0.7), hit("b", 0.3, 0.5), hit("c", 0.1, 0.2)]) == [
        ("a", 0.7),
        ("b", 0.5),
        ("c", 0.2),
    ]


def test_a_hit_ranked_above_a_more_similar_one_takes_its_similarity() -> None:
    # "b" is first by the fused signals (BM25, entities) though less like the query
    assert scored([hit("b", 0.5, 0.1), hit("a", 0.4, 0.6), hit("c", 0.1, 0.05)]) == [
        ("b", 0.6),
        ("a", 0.6),
        ("c", 0.05),
    ]


def test_a_reply_is_as_similar_as_the_hit_it_answers() -> None:
    hits = [hit("q", 0.5, 0.62), hit("r", 0.5, 0.08, reply_to="q"), hit("x", 0.3, 0.31)]
    assert scored(hits) == [("q", 0.62), ("r", 0.62), ("x", 0.31)]


def test_the_fused_score_and_the_rank_stay_in_explain() -> None:
    hits = [hit("b", 0.5, 0.1), hit("a", 0.4, 0.6)]
    on_similarity_scale(hits)
    assert [(h.explain.fused, h.explain.rank) for h in hits if h.explain] == [(0.5, 1), (0.4, 2)]


def test_scores_stay_in_the_unit_interval() -> None:
    assert scored([hit("a", 0.9, 1.2), hit("b", 0.2, -0.3)]) == [("a", 1.0), ("b", 0.0)]


def test_no_hits_is_nothing_to_score() -> None:
    assert scored([]) == []
