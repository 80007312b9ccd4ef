"""Placing the reply to the best hit: pure list work over hits."""

from __future__ import annotations

from typing import Any

from pipeline.serving.replies import followed_by_reply, reply_key
from pipeline.serving.search_models import Explain, SearchHit
from pipeline.store.queries import reply_body


def hit(memory_id: str, score: float) -> SearchHit:
    explain = Explain(semantic=score, bm25=0, bm25_raw=0, entity=0, fused=score)
    return SearchHit(id=memory_id, memory=f"text {memory_id}", score=score, explain=explain)


SOURCE: dict[str, Any] = {"text": "the reply", "user_id": "u1", "actor_id": "Mel"}


def test_only_a_conversation_turn_has_a_reply() -> None:
    assert reply_key({"job_id": "j1", "turn": 3}) == ("j1", 4)
    assert reply_key({"job_id": "j1", "turn": 0}) == ("j1", 1)
    assert reply_key({"job_id": "j1"}) is None  # an extracted fact
    assert reply_key({"turn": 2}) is None
    assert reply_key({"job_id": "j1", "turn": True}) is None


def test_a_reply_from_outside_the_candidates_comes_second_with_the_score_it_displaces() -> None:
    hits = [hit("a", 0.9), hit("b", 0.5), hit("c", 0.4)]
    placed = followed_by_reply(hits, "r", SOURCE, explain=True)
    assert [h.id for h in placed] == ["a", "r", "b", "c"]
    reply = placed[1]
    assert reply.memory == "the reply" and reply.actor_id == "Mel"
    assert reply.score == 0.5
    assert reply.explain is not None and reply.explain.reply_to == "a"
    assert [h.id for h in hits] == ["a", "b", "c"]  # the input is not changed


def test_a_reply_among_the_hits_moves_up_and_keeps_its_signals() -> None:
    hits = [hit("a", 0.9), hit("b", 0.5), hit("r", 0.3)]
    placed = followed_by_reply(hits, "r", SOURCE, explain=True)
    assert [h.id for h in placed] == ["a", "r", "b"]
    assert placed[1].score == 0.5
    assert placed[1].explain is not None
    assert placed[1].explain.semantic == 0.3 and placed[1].explain.reply_to == "a"


def test_nothing_moves_when_the_reply_is_already_there_or_is_the_best_hit() -> None:
    hits = [hit("a", 0.9), hit("r", 0.5)]
    assert followed_by_reply(hits, "r", SOURCE, explain=True) is hits
    assert followed_by_reply(hits, "a", SOURCE, explain=True) is hits
    assert followed_by_reply([], "r", SOURCE, explain=True) == []


def test_a_lone_best_hit_gets_its_reply_at_its_own_score_without_explain() -> None:
    placed = followed_by_reply([hit("a", 0.8)], "r", SOURCE, explain=False)
    assert [(h.id, h.score) for h in placed] == [("a", 0.8), ("r", 0.8)]
    assert placed[1].explain is None


def test_the_reply_is_searched_inside_the_callers_clauses() -> None:
    clauses = [{"term": {"user_id": "u1"}}]
    body = reply_body(("j1", 4), clauses)
    assert body["size"] == 1
    assert body["query"]["bool"]["filter"] == [
        *clauses,
        {"term": {"job_id": "j1"}},
        {"term": {"turn": 4}},
    ]
