"""What a search costs beyond a plain one: its filter's substring conditions and list values,
a reranker pass, many hits."""

from __future__ import annotations

from typing import Any

from pipeline.serving.search_cost import search_cost
from pipeline.serving.search_models import SearchOptions
from pipeline.store.filters import MAX_LIST_VALUES, MAX_TERM_SCANS, filter_cost

SCANS = {"OR": [{f: {"icontains": "abc"}} for f in ("agent_id", "run_id", "actor_id", "job_id")]}


def lists(values: int) -> list[dict[str, Any]]:
    per_list = min(values, 1024)
    return [
        {"hash": {"nin": [f"h{i}-{n}" for i in range(per_list)]}} for n in range(values // per_list)
    ]


def test_a_plain_search_costs_nothing() -> None:
    assert search_cost(SearchOptions(query="tea"), rerank_candidates=50) == 0
    plain = {
        "AND": [{"role": {"in": ["user", "assistant"]}}, {"created_at": {"gte": "2024-01-01"}}]
    }
    assert filter_cost(plain) == 0  # short lists
    assert filter_cost({"AND": lists(511)}) == 0
    assert filter_cost({"role": "user", "text": {"contains": "tea"}}) == 0  # a phrase match


def test_substring_conditions_and_list_values_cost_units() -> None:
    assert MAX_TERM_SCANS == 4 and MAX_LIST_VALUES == 2048
    assert filter_cost(SCANS) == 4
    assert filter_cost({"AND": lists(1024)}) == 2
    assert filter_cost({"AND": [SCANS, *lists(2048)]}) == 8  # the costliest filter allowed
    assert filter_cost({"agent_id": {"contains": "a"}}) == 0  # refused by the search itself


def test_rerank_and_many_hits_cost_units() -> None:
    assert search_cost(SearchOptions(query="tea", top_k=100), rerank_candidates=50) == 0
    assert search_cost(SearchOptions(query="tea", top_k=101), rerank_candidates=50) == 1
    assert search_cost(SearchOptions(query="tea", top_k=1000), rerank_candidates=50) == 9
    assert search_cost(SearchOptions(query="tea", rerank=True), rerank_candidates=50) == 1
    reranked_deep = SearchOptions(query="tea", rerank=True, filters=SCANS)
    assert search_cost(reranked_deep, rerank_candidates=300) == 4 + 1 + 2
