"""Hybrid search against the real node, with the real local embedder and lemmatizer."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from pipeline.config import Settings
from pipeline.domain.models import Scope, memory_id
from pipeline.errors import InvalidInputError
from pipeline.serving.search import Searcher, SearchQuery
from pipeline.store.indices import IndexNames
from pipeline.store.protocol import EntityDoc, EntityLink, MemoryDoc
from pipeline.store.routing import scope_routing
from workers.runtime import Runtime

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def runtime(settings: Settings, indices: IndexNames) -> Runtime:
    return Runtime(settings)


@pytest.fixture(scope="module")
def searcher(runtime: Runtime) -> Searcher:
    return replace(
        runtime.searcher,
        config=runtime.settings.search.model_copy(update={"candidates_per_signal": 10}),
    )


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="search", user_id=f"u-{uuid.uuid4().hex[:8]}")


def put(runtime: Runtime, scope: Scope, *texts: str, **extra: object) -> list[str]:
    """Store memories as ingestion would (real embeddings, real lemmas), visible at once."""
    deps = runtime.deps
    vectors = deps.embedder.embed(list(texts))
    docs = [
        MemoryDoc(
            id=memory_id(scope, f"{text}{extra}"),
            scope=scope,
            text=text,
            text_lemmatized=deps.lemmatizer.lemmatize(text),
            embedding=vector,
            hash=f"{text}{extra}",
            job_id="test",
            created_at=NOW,
            observed_at=NOW,
            **extra,
        )  # type: ignore[arg-type]
        for text, vector in zip(texts, vectors, strict=True)
    ]
    outcome = runtime.store.create_memories(docs)
    assert not outcome.failed
    runtime.es.indices.refresh(index=runtime.store.names.memories)
    return [d.id for d in docs]


def lisbon(runtime: Runtime, scope: Scope) -> EntityDoc:
    """An entity of the scope, "Lisbon", with a fresh id (not yet stored)."""
    return EntityDoc(
        id=f"e-{uuid.uuid4().hex}",
        scope=scope,
        text="Lisbon",
        normalized="lisbon",
        type="name",
        embedding=runtime.deps.embedder.embed(["Lisbon"])[0],
        created_at=NOW,
    )


def texts(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.memory for h in hits]


def test_the_closest_memory_comes_first(runtime: Runtime, searcher: Searcher, scope: Scope) -> None:
    put(
        runtime,
        scope,
        "Caroline went to an LGBTQ support group",
        "Melanie painted a sunrise",
        "The user is allergic to peanuts",
    )
    hits = searcher.search(
        SearchQuery(query="Which support group did Caroline attend?", scope=scope)
    )
    assert hits[0].memory == "Caroline went to an LGBTQ support group"


def test_a_keyword_only_hit_is_returned(runtime: Runtime, searcher: Searcher, scope: Scope) -> None:
    """Memories closer in meaning (but sharing no word with the query) fill the vector list;
    the one with the rare word must still come back, found by BM25 alone."""
    fillers = [f"The user loves trekking across the Alps, trip {i}" for i in range(25)]
    put(runtime, scope, *fillers, "Deploy notes: the cluster runs zorblatt 3.2")
    hits = searcher.search(
        SearchQuery(query="hiking mountains zorblatt", scope=scope, explain=True, top_k=10)
    )
    hit = next(h for h in hits if "zorblatt" in h.memory)
    assert hit.explain is not None and hit.explain.rank_bm25 == 1
    assert hit.explain.rank_semantic is None


def test_an_entity_only_hit_is_returned(runtime: Runtime, searcher: Searcher, scope: Scope) -> None:
    fillers = [f"Planning the Lisbon trip, day {i}: book the Lisbon hotel" for i in range(12)]
    put(runtime, scope, *fillers)
    [linked] = put(runtime, scope, "We flew there in May and ate pastries")
    entity = lisbon(runtime, scope)
    runtime.store.link_entities([EntityLink(entity, [linked], entity.id)])
    runtime.es.indices.refresh(index=runtime.store.names.entities)
    weights = {"weight_semantic": 0.2, "weight_bm25": 0.2, "weight_entity": 0.6}
    entity_heavy = replace(searcher, config=searcher.config.model_copy(update=weights))
    hits = entity_heavy.search(
        SearchQuery(query="Lisbon trip", scope=scope, explain=True, top_k=10)
    )
    assert hits[0].id == linked  # found by its entity link alone, and it can win
    hit = hits[0]
    assert hit.explain is not None and hit.explain.entity > 0 and hit.explain.rank_entity == 1
    assert hit.explain.rank_bm25 is None and hit.explain.rank_semantic is None


def test_a_hub_entity_only_boosts_what_the_other_signals_found(
    runtime: Runtime, searcher: Searcher, scope: Scope
) -> None:
    fillers = put(runtime, scope, *(f"Planning the Lisbon trip, day {i}" for i in range(12)))
    unrelated = put(runtime, scope, "Filed the quarterly tax forms", "Repainted the fence green")
    entity = lisbon(runtime, scope)
    runtime.store.link_entities([EntityLink(entity, [*fillers[:3], *unrelated], entity.id)])
    runtime.es.indices.refresh(index=runtime.store.names.entities)
    query = SearchQuery(query="Lisbon trip", scope=scope, explain=True, top_k=5)
    weights = {"weight_semantic": 0.05, "weight_bm25": 0.05, "weight_entity": 0.9}
    for cap, expected in ((100, set(unrelated)), (2, set())):
        config = searcher.config.model_copy(update={**weights, "entity_links_per_entity": cap})
        hits = replace(searcher, config=config).search(query)
        boosted = {h.id for h in hits if h.explain is not None and h.explain.entity > 0}
        assert boosted >= set(fillers[:3])
        assert boosted & set(unrelated) == expected


def test_jobs_linking_one_entity_at_once_lose_no_link(runtime: Runtime, scope: Scope) -> None:
    memories = put(
        runtime, scope, *(f"Dinner with the Lisbon crowd, evening {i}" for i in range(12))
    )
    entity = lisbon(runtime, scope)

    def link(memory: str) -> None:
        runtime.store.link_entities([EntityLink(entity, [memory], entity.id)])

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(link, memories))
    names = runtime.store.names
    routing = scope_routing(entity.scope)
    held = runtime.es.get(index=names.entities, id=entity.id, routing=routing)["_source"]
    assert sorted(held["linked_memory_ids"]) == sorted(memories)
    docs = runtime.es.mget(index=names.memories, ids=memories, routing=routing)["docs"]
    assert all(d["_source"]["entity_ids"] == [entity.id] for d in docs)


def test_explain_matches_the_ranking(runtime: Runtime, searcher: Searcher, scope: Scope) -> None:
    put(
        runtime,
        scope,
        "Jon opened a dance studio",
        "Jon lost his banking job",
        "Gina sells clothes online",
    )
    hits = searcher.search(
        SearchQuery(query="What business did Jon start?", scope=scope, explain=True)
    )
    config = searcher.config
    total = config.weight_semantic + config.weight_bm25 + config.weight_entity
    for hit in hits:
        e = hit.explain
        assert e is not None
        expected = (
            config.weight_semantic * e.semantic
            + config.weight_bm25 * e.bm25
            + config.weight_entity * e.entity
        ) / total
        if e.feedback is not None:  # mixed in last, the fused score weighing 1
            expected = (expected + config.weight_feedback * e.feedback) / (
                1 + config.weight_feedback
            )
        if e.hop is not None:  # then the second hop's, the same way
            expected = (expected + config.weight_hop * e.hop) / (1 + config.weight_hop)
        assert abs(e.fused - expected) < 1e-4
        assert 0 <= e.semantic <= 1 and 0 <= e.bm25 <= 1
    assert [h.explain.rank for h in hits if h.explain] == list(range(1, len(hits) + 1))
    assert [h.explain.fused for h in hits if h.explain] == sorted(
        (h.explain.fused for h in hits if h.explain), reverse=True
    )
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert (
        searcher.search(SearchQuery(query="What business did Jon start?", scope=scope))[0].explain
        is None
    )


def test_threshold_applies_to_the_score(runtime: Runtime, searcher: Searcher, scope: Scope) -> None:
    put(runtime, scope, "Nate plays chess every Sunday", "The weather was rainy")
    everything = searcher.search(SearchQuery(query="chess", scope=scope))
    cut = (everything[0].score + everything[-1].score) / 2
    kept = searcher.search(SearchQuery(query="chess", scope=scope, threshold=cut))
    assert texts(kept) == [h.memory for h in everything if h.score >= cut]
    assert 0 < len(kept) < len(everything)


def test_expired_memories_are_hidden_unless_asked_for(
    runtime: Runtime, searcher: Searcher, scope: Scope
) -> None:
    put(runtime, scope, "Coupon code SPRING valid", expiration_date=NOW - timedelta(days=1))
    put(runtime, scope, "Coupon code SUMMER valid", expiration_date=NOW + timedelta(days=30))
    visible = texts(searcher.search(SearchQuery(query="coupon code", scope=scope)))
    assert visible == ["Coupon code SUMMER valid"]
    everything = texts(
        searcher.search(SearchQuery(query="coupon code", scope=scope, show_expired=True))
    )
    assert sorted(everything) == ["Coupon code SPRING valid", "Coupon code SUMMER valid"]


def test_a_tenant_never_sees_another_tenants_memories(runtime: Runtime, searcher: Searcher) -> None:
    user = f"shared-{uuid.uuid4().hex[:6]}"
    put(runtime, Scope(tenant="tenant-a", user_id=user), "A's secret: the vault code is 1234")
    put(runtime, Scope(tenant="tenant-b", user_id=user), "B likes sailing")
    hits = searcher.search(
        SearchQuery(query="vault code secret", scope=Scope(tenant="tenant-b", user_id=user))
    )
    assert texts(hits) == ["B likes sailing"]


def test_filters_apply_to_every_signal(runtime: Runtime, searcher: Searcher, scope: Scope) -> None:
    put(runtime, scope, "Caroline likes jazz", metadata={"source": "chat"})
    put(runtime, scope, "Caroline likes techno", metadata={"source": "email"})
    hits = searcher.search(
        SearchQuery(query="Caroline likes music", scope=scope, filters={"source": "email"})
    )
    assert texts(hits) == ["Caroline likes techno"]


def test_several_queries_in_one_call(runtime: Runtime, searcher: Searcher, scope: Scope) -> None:
    put(runtime, scope, "Audrey has three dogs", "Audrey lives in Ohio")
    dogs, home = searcher.search_many(
        [
            SearchQuery(query="How many dogs does Audrey have?", scope=scope, top_k=1),
            SearchQuery(query="Where does Audrey live?", scope=scope, top_k=1),
        ]
    )
    assert texts(dogs) == ["Audrey has three dogs"] and texts(home) == ["Audrey lives in Ohio"]


def test_bad_queries_are_clear_errors(searcher: Searcher, scope: Scope) -> None:
    with pytest.raises(ValidationError, match="query is empty"):
        SearchQuery(query="   ", scope=scope)
    with pytest.raises(InvalidInputError) as caught:
        searcher.search(SearchQuery(query="x", scope=scope, top_k=999))
    assert caught.value.field == "top_k"
    with pytest.raises(InvalidInputError) as caught:
        searcher.search(SearchQuery(query="x", scope=scope, rerank=True))
    assert caught.value.field == "rerank"
    with pytest.raises(InvalidInputError):
        searcher.search(SearchQuery(query="x", scope=scope, filters={"age": {"between": [1, 2]}}))


def test_an_empty_scope_finds_nothing(searcher: Searcher, scope: Scope) -> None:
    assert searcher.search(SearchQuery(query="anything at all", scope=scope)) == []


class OverlapReranker:
    """A reranker by word overlap with the query: another implementation of the protocol."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append(len(texts))
        wanted = set(query.lower().split())
        return [len(wanted & set(t.lower().split())) / max(len(wanted), 1) for t in texts]


def test_rerank_rescores_an_over_fetched_set(
    runtime: Runtime, searcher: Searcher, scope: Scope
) -> None:
    put(
        runtime,
        scope,
        "green tea every morning",
        "the user drinks green tea",
        "coffee after lunch",
        "tea ceremonies in Kyoto",
        "the user dislikes coffee",
    )
    reranker = OverlapReranker()
    with_reranker = replace(searcher, reranker=reranker)
    hits = with_reranker.search(
        SearchQuery(query="the user drinks tea", scope=scope, top_k=2, rerank=True, explain=True)
    )
    assert reranker.calls == [5]  # every candidate: fewer than rerank_candidates
    assert hits[0].memory == "the user drinks green tea"
    assert hits[0].explain is not None and hits[0].explain.rerank == hits[0].score
    assert len(hits) == 2
