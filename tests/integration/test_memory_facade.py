"""``pipeline.memory.Memory``, the in-process way to use memq, with mem0's method set, over the
real node and the real local embedder: add, search, get, get_all, update, delete, delete_all and
history, scoped by tenant and user as the API scopes them."""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import replace

import pytest

from pipeline.config import Settings
from pipeline.errors import ConfigurationError, NotFoundError
from pipeline.memory import AsyncMemory, Memory
from pipeline.store.indices import IndexNames
from pipeline.store.memory import InMemoryStore
from workers.runtime import Runtime

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def runtime(settings: Settings, indices: IndexNames) -> Runtime:
    return Runtime(settings)


@pytest.fixture
def memory(runtime: Runtime) -> Memory:
    return Memory(runtime.deps, tenant=f"facade-{uuid.uuid4().hex[:8]}")


def add_two(memory: Memory, user: str) -> list[str]:
    added = memory.add(
        [
            {"role": "user", "content": "I play chess every Sunday"},
            {"role": "user", "content": "My sister lives in Porto"},
        ],
        user_id=user,
        infer=False,
    )
    assert [r["event"] for r in added["results"]] == ["ADD", "ADD"]
    return [r["id"] for r in added["results"]]


def test_added_memories_are_searchable_and_readable_at_once(memory: Memory) -> None:
    chess, porto = add_two(memory, "alice")
    found = memory.search("which board game does she play", user_id="alice", limit=2)
    assert found["results"][0]["id"] == chess and found["results"][0]["score"] > 0
    assert memory.get(porto)["memory"] == "My sister lives in Porto"
    assert "provenance" not in memory.get(porto)
    [source] = memory.get(porto, include_sources=True)["provenance"]["sources"]
    assert (source["content"], source["seq"]) == ("My sister lives in Porto", 1)
    listed = memory.get_all(user_id="alice")["results"]
    assert {m["id"] for m in listed} == {chess, porto}
    assert memory.get_all(user_id="bob")["results"] == []
    assert memory.search("chess", user_id="bob")["results"] == []


def test_update_delete_and_history(memory: Memory) -> None:
    chess, porto = add_two(memory, "alice")
    changed = memory.update(chess, "I play chess every Saturday")
    assert changed["id"] == chess and changed["memory"] == "I play chess every Saturday"
    assert memory.delete(porto) == {"message": "Memory deleted successfully!"}
    with pytest.raises(NotFoundError):
        memory.get(porto)
    assert [row["event"] for row in memory.history(chess)] == ["ADD", "UPDATE"]
    assert [row["event"] for row in memory.history(porto)] == ["ADD", "DELETE"]


def test_delete_all_empties_the_scope_only(memory: Memory) -> None:
    add_two(memory, "alice")
    [bob] = memory.add("I collect stamps", user_id="bob", infer=False)["results"]
    assert memory.delete_all(user_id="alice")["deleted"] == 2
    assert memory.get_all(user_id="alice")["results"] == []
    assert memory.get(bob["id"])["memory"] == "I collect stamps"


def test_another_tenant_sees_nothing(memory: Memory, runtime: Runtime) -> None:
    chess, _ = add_two(memory, "alice")
    other = Memory(runtime.deps, tenant=f"{memory.tenant}-other")
    with pytest.raises(NotFoundError):
        other.get(chess)
    assert other.search("chess", user_id="alice")["results"] == []


def test_a_store_that_only_runs_jobs_says_what_the_rest_needs(runtime: Runtime) -> None:
    local = Memory(replace(runtime.deps, store=InMemoryStore()))
    assert len(local.add("I play chess", user_id="alice", infer=False)["results"]) == 1
    with pytest.raises(ConfigurationError, match="need Elasticsearch"):
        local.search("chess", user_id="alice")


def test_async_memory_has_the_same_methods_and_runs_on_the_callers_thread(
    runtime: Runtime,
) -> None:
    memory = AsyncMemory(runtime.deps, tenant=f"facade-{uuid.uuid4().hex[:8]}")
    before = threading.active_count()

    async def scenario() -> None:
        added = await memory.add("I play chess every Sunday", user_id="alice", infer=False)
        [chess] = [r["id"] for r in added["results"]]
        assert (await memory.search("chess", user_id="alice"))["results"][0]["id"] == chess
        assert (await memory.get(chess))["memory"] == "I play chess every Sunday"
        assert len((await memory.get_all(user_id="alice"))["results"]) == 1
        await memory.update(chess, "I play chess every Saturday")
        assert [r["event"] for r in await memory.history(chess)] == ["ADD", "UPDATE"]
        await memory.delete(chess)
        assert (await memory.delete_all(user_id="alice"))["deleted"] == 0
        assert threading.active_count() == before  # no worker thread was started

    asyncio.run(scenario())
