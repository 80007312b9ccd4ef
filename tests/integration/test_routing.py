"""Routing by scope on an index of three shards (``MEMQ_ES_SHARDS=3``): a scoped search visits
one shard, documents of different users spread over the shards, and every path that reads or
changes a memory (by id, by scope, by user, through the facade) still finds routed documents.
The store contract suite also runs over this sharded store (test_store_contract.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.domain.models import Scope
from pipeline.errors import NotFoundError
from pipeline.features.erase import erase_user
from pipeline.memory import Memory
from pipeline.store.elastic import ElasticStore, scope_filter
from pipeline.store.indices import Kind, drop_indices
from pipeline.store.routing import scope_routing
from workers.runtime import Runtime

pytestmark = pytest.mark.integration

SHARDS = 3


def sharded_settings(settings: Settings) -> Settings:
    """The test settings on a prefix of their own whose indices have three shards."""
    es = settings.es.model_copy(
        update={"shards": SHARDS, "index_prefix": f"{settings.es.index_prefix}-sh3"}
    )
    return settings.model_copy(update={"es": es})


@pytest.fixture(scope="module")
def sharded(settings: Settings, es: Elasticsearch) -> Iterator[Runtime]:
    runtime = Runtime(sharded_settings(settings))
    store = runtime.store  # creates the indices
    yield runtime
    drop_indices(es, store.names)


@pytest.fixture
def memory(sharded: Runtime) -> Memory:
    return Memory(sharded.deps, tenant=f"routing-{uuid.uuid4().hex[:8]}")


def body(scope: Scope) -> dict[str, object]:
    return {"size": 10, "query": {"bool": {"filter": scope_filter(scope)}}}


def test_every_index_takes_its_shards_and_replicas_from_settings(
    sharded: Runtime, es: Elasticsearch
) -> None:
    names = sharded.store.names
    for kind in Kind:
        found = es.indices.get(index=names.alias(kind)).body
        ((_, index),) = found.items()
        assert index["settings"]["index"]["number_of_shards"] == str(SHARDS), kind
        assert index["settings"]["index"]["number_of_replicas"] == "0", kind
        routed = index["mappings"].get("_routing", {}).get("required", False)
        assert routed == (kind not in (Kind.JOBS, Kind.KEYS)), kind


def test_a_scoped_search_visits_one_shard_and_a_search_by_agent_all(
    memory: Memory, sharded: Runtime
) -> None:
    memory.add("I play chess", user_id="alice", agent_id="coach", infer=False)
    sharded.store.make_visible()
    store = sharded.store
    alice = Scope(tenant=memory.tenant, user_id="alice")
    coach = Scope(tenant=memory.tenant, agent_id="coach")
    by_user, by_agent = store.search_memories(
        [body(alice), body(coach)], "test", scopes=[alice, coach]
    )
    assert by_user["_shards"]["total"] == 1
    assert by_agent["_shards"]["total"] == SHARDS
    assert len(by_user["hits"]["hits"]) == len(by_agent["hits"]["hits"]) == 1


def test_users_spread_over_the_shards(memory: Memory, sharded: Runtime, es: Elasticsearch) -> None:
    users = [f"user-{i}" for i in range(24)]
    for user in users:
        memory.add(f"{user} likes tea", user_id=user, infer=False)
    sharded.store.make_visible()
    names = sharded.store.names
    on_shard = [
        es.count(
            index=names.memories,
            preference=f"_shards:{shard}",
            query={"term": {"tenant": memory.tenant}},
        )["count"]
        for shard in range(SHARDS)
    ]
    assert sum(on_shard) == len(users)
    assert sum(1 for n in on_shard if n) > 1  # not all on one shard
    for user in users:  # and each user's memories on exactly the shard its routing names
        scope = Scope(tenant=memory.tenant, user_id=user)
        hits = es.search(
            index=names.memories, routing=scope_routing(scope), query=body(scope)["query"]
        )["hits"]["hits"]
        assert [h["_routing"] for h in hits] == [scope_routing(scope)]


def test_every_path_by_id_finds_a_routed_memory(memory: Memory) -> None:
    [chess] = [r["id"] for r in memory.add("I play chess", user_id="bob", infer=False)["results"]]
    assert memory.get(chess)["memory"] == "I play chess"  # by id alone, written a moment ago
    memory.update(chess, "I play chess on Sundays")
    assert memory.get(chess)["memory"] == "I play chess on Sundays"
    assert [row["event"] for row in memory.history(chess)] == ["ADD", "UPDATE"]
    memory.delete(chess)
    with pytest.raises(NotFoundError):
        memory.get(chess)
    assert [row["event"] for row in memory.history(chess)] == ["ADD", "UPDATE", "DELETE"]


def test_scoped_paths_find_routed_memories(memory: Memory) -> None:
    memory.add("I collect stamps", user_id="carol", agent_id="a1", infer=False)
    memory.add("I grow tomatoes", user_id="carol", agent_id="a2", infer=False)
    memory.add("I restore bikes", agent_id="a1", infer=False)  # no user: routed by agent
    found = memory.search("stamps", user_id="carol", limit=5)["results"]
    assert found and found[0]["memory"] == "I collect stamps"
    assert len(memory.get_all(user_id="carol")["results"]) == 2
    by_agent = {m["memory"] for m in memory.get_all(agent_id="a1")["results"]}
    assert by_agent == {"I collect stamps", "I restore bikes"}  # across routings
    assert memory.delete_all(agent_id="a1")["deleted"] == 2
    assert [m["memory"] for m in memory.get_all(user_id="carol")["results"]] == ["I grow tomatoes"]


def test_erasing_a_user_reaches_their_routed_documents(memory: Memory, sharded: Runtime) -> None:
    memory.add("I live in Oslo", user_id="dave", infer=False)
    memory.add("I live in Rome", user_id="erin", infer=False)
    erased = erase_user(sharded.store, memory.tenant, "dave", datetime.now(UTC))
    assert erased.counts["memories"] == 1 and erased.counts["history"] == 1
    assert memory.get_all(user_id="dave")["results"] == []
    assert len(memory.get_all(user_id="erin")["results"]) == 1


def test_a_write_without_routing_is_refused(sharded: Runtime, es: Elasticsearch) -> None:
    """``_routing: required``: a forgotten routing is an error, not a document on the wrong
    shard that routed reads would never find."""
    from elasticsearch import BadRequestError

    store: ElasticStore = sharded.store
    with pytest.raises(BadRequestError, match="routing"):
        es.index(index=store.names.memories, id="unrouted", document={"text": "x"})
    with pytest.raises(BadRequestError, match="routing"):
        es.get(index=store.names.memories, id="unrouted")
