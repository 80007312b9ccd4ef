"""Cursor pagination and bulk deletion over thousands of memories, on the real node."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from elasticsearch import Elasticsearch, helpers

from pipeline.domain.models import Scope
from pipeline.errors import InvalidInputError
from pipeline.serving.listing import delete_all, list_memories
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames
from pipeline.store.routing import scope_routing

pytestmark = pytest.mark.integration

T0 = datetime(2024, 1, 1, tzinfo=UTC)
VECTOR = [1.0] + [0.0] * 383


@pytest.fixture
def store(es: Elasticsearch, indices: IndexNames) -> ElasticStore:
    return ElasticStore(es, indices)


def fill(
    es: Elasticsearch, names: IndexNames, scope: Scope, count: int, same_time: bool = False
) -> set[str]:
    """``count`` memories; with ``same_time`` they all share one created_at (ties in the sort)."""
    ids = [f"{scope.user_id}-{i}" for i in range(count)]
    actions = (
        {
            "_index": names.memories,
            "_id": doc_id,
            "_routing": scope_routing(scope),
            "_source": {
                **scope.fields(),
                "text": f"memory {i}",
                "hash": doc_id,
                "embedding": VECTOR,
                "metadata": {"parity": "even" if i % 2 == 0 else "odd"},
                "created_at": (T0 if same_time else T0 + timedelta(seconds=i)).isoformat(),
            },
        }
        for i, doc_id in enumerate(ids)
    )
    helpers.bulk(es, actions, refresh="wait_for", chunk_size=1000)
    return set(ids)


def collect(store: ElasticStore, scope: Scope, page_size: int, **kw: object) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = list_memories(store, scope, page_size=page_size, cursor=cursor, **kw)  # type: ignore[arg-type]
        seen += [item.id for item in page.items]
        if page.cursor is None:
            return seen
        cursor = page.cursor


@pytest.mark.parametrize("same_time", [False, True])
def test_thousands_of_memories_page_without_gaps_or_duplicates(
    es: Elasticsearch, indices: IndexNames, store: ElasticStore, same_time: bool
) -> None:
    scope = Scope(tenant="listing", user_id=f"u-{uuid.uuid4().hex[:8]}")
    expected = fill(es, indices, scope, 2_500, same_time)
    seen = collect(store, scope, page_size=300)
    assert len(seen) == len(set(seen)) == 2_500
    assert set(seen) == expected


def test_pages_come_from_one_point_in_time(
    es: Elasticsearch, indices: IndexNames, store: ElasticStore
) -> None:
    scope = Scope(tenant="listing", user_id=f"u-{uuid.uuid4().hex[:8]}")
    fill(es, indices, scope, 50)
    first = list_memories(store, scope, page_size=20)
    es.index(
        index=indices.memories,
        id="late",
        routing=scope_routing(scope),
        refresh="wait_for",
        document={**scope.fields(), "text": "late", "created_at": T0.isoformat()},
    )
    rest: list[str] = []
    cursor = first.cursor
    while cursor is not None:
        page = list_memories(store, scope, page_size=20, cursor=cursor)
        rest += [item.id for item in page.items]
        cursor = page.cursor
    assert "late" not in rest and len(first.items) + len(rest) == 50


def test_filters_narrow_the_listing(
    es: Elasticsearch, indices: IndexNames, store: ElasticStore
) -> None:
    scope = Scope(tenant="listing", user_id=f"u-{uuid.uuid4().hex[:8]}")
    fill(es, indices, scope, 40)
    even = collect(store, scope, page_size=7, filters={"parity": "even"})
    assert len(even) == 20 and all(int(i.rsplit("-", 1)[1]) % 2 == 0 for i in even)


def test_delete_all_removes_the_scope_and_only_it(
    es: Elasticsearch, indices: IndexNames, store: ElasticStore
) -> None:
    doomed = Scope(tenant="listing", user_id=f"u-{uuid.uuid4().hex[:8]}")
    kept = Scope(tenant="listing", user_id=f"u-{uuid.uuid4().hex[:8]}")
    fill(es, indices, doomed, 1_200)
    fill(es, indices, kept, 10)
    assert delete_all(store, doomed, None, datetime.now(UTC)) == 1_200
    assert collect(store, doomed, page_size=500) == []
    assert len(collect(store, kept, page_size=500)) == 10
    es.indices.refresh(index=indices.history)
    rows = es.count(
        index=indices.history,
        query={
            "bool": {
                "filter": [{"term": {"user_id": doomed.user_id}}, {"term": {"event": "DELETE"}}]
            }
        },
    )
    assert rows["count"] == 1_200


def test_bad_cursors_and_page_sizes_are_clear_errors(store: ElasticStore) -> None:
    scope = Scope(tenant="listing", user_id="nobody")
    with pytest.raises(InvalidInputError) as caught:
        list_memories(store, scope, cursor="not-a-cursor")
    assert caught.value.field == "cursor"
    with pytest.raises(InvalidInputError) as caught:
        list_memories(store, scope, page_size=0)
    assert caught.value.field == "page_size"
