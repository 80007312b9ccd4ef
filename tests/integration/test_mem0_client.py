"""The ``mem0ai`` hosted client (``MemoryClient``), unchanged, against memq's mem0 routes over
real HTTP: an application written for mem0's platform works against memq.

``mem0ai`` comes with the dev extras; without it these tests fail (they never skip). Telemetry is
off and mem0's state directory is a temporary one, both set before ``mem0`` is imported.
"""

from __future__ import annotations

import asyncio
import importlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.test_api import (
    Tenant,
    admin_key,
    create_tenant,
    http_client,
    temporary_tenant,
    wait_until,
)

pytestmark = pytest.mark.integration


def import_mem0(monkeypatch: pytest.MonkeyPatch, mem0_dir: str) -> Any:
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", mem0_dir)
    try:
        return importlib.import_module("mem0")
    except ImportError as exc:
        pytest.fail(
            f"mem0ai is not importable ({exc}): install the dev extras "
            "(.venv/bin/pip install -e '.[server,dev]')"
        )


@pytest.fixture(scope="module")
def mem0(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as patch:
        yield import_mem0(patch, str(tmp_path_factory.mktemp("mem0")))


@pytest.fixture(scope="module")
def base_url(api_url: str) -> str:
    return api_url


@pytest.fixture(scope="module")
def tenant(base_url: str) -> Iterator[Tenant]:
    with temporary_tenant(base_url, "mem0") as created:
        yield created


@pytest.fixture(scope="module")
def client(mem0: Any, tenant: Tenant, base_url: str) -> Iterator[Any]:
    """``MemoryClient`` as an application builds it: the constructor pings the server."""
    memory_client = mem0.MemoryClient(api_key=tenant.key, host=base_url)
    yield memory_client
    memory_client.client.close()


@pytest.fixture
def uid(tenant: Tenant) -> Iterator[str]:
    user_id = f"mem0-{uuid.uuid4().hex[:12]}"
    yield user_id
    tenant.http.delete("/v1/memories", params={"user_id": user_id})


def add(client: Any, user_id: str, text: str, **extra: Any) -> dict[str, Any]:
    reply = client.add(text, user_id=user_id, infer=False, **extra)
    (result,) = reply["results"]
    assert result["memory"] == text
    assert result["event"] == "ADD"
    assert isinstance(result["id"], str)
    memory: dict[str, Any] = result
    return memory


def listed(client: Any, user_id: str, count: int) -> dict[str, Any]:
    """``get_all`` once ``count`` memories show (listing reads a refreshed index)."""
    return wait_until(
        lambda: (
            (page := client.get_all(filters={"user_id": user_id}))["count"] == count
            and len(page["results"]) == count
            and page
        ),
        f"{count} memories of {user_id} in get_all",
    )


def test_construction_pings_and_reads_the_tenant(client: Any, tenant: Tenant) -> None:
    assert client.org_id == tenant.name
    assert client.project_id == tenant.name


def test_a_wrong_key_fails_at_construction(mem0: Any, base_url: str) -> None:
    key = f"mq_{'0' * 16}_{'x' * 43}"
    with httpx.Client() as http, pytest.raises(ValueError, match="unknown or revoked API key"):
        mem0.MemoryClient(api_key=key, host=base_url, client=http)


def test_add_get_and_get_all(client: Any, uid: str) -> None:
    first = add(client, uid, "I love sushi", metadata={"topic": "food"})
    second = add(client, uid, "I live in Oslo")
    got = client.get(first["id"])
    assert (got["id"], got["memory"], got["user_id"]) == (first["id"], "I love sushi", uid)
    assert got["metadata"] == {"topic": "food"}
    page = listed(client, uid, 2)
    assert {m["id"] for m in page["results"]} == {first["id"], second["id"]}
    assert {m["memory"] for m in page["results"]} == {"I love sushi", "I live in Oslo"}
    assert all(m["user_id"] == uid for m in page["results"])
    assert page["next"] is None
    assert page["previous"] is None


def test_get_all_pages(client: Any, uid: str) -> None:
    for i in range(3):
        add(client, uid, f"paged fact {i}")
    listed(client, uid, 3)
    first = client.get_all(filters={"user_id": uid}, page=1, page_size=2)
    second = client.get_all(filters={"user_id": uid}, page=2, page_size=2)
    assert (len(first["results"]), first["next"], first["previous"]) == (2, 2, None)
    assert (len(second["results"]), second["next"], second["previous"]) == (1, None, 1)
    ids = {m["id"] for m in first["results"] + second["results"]}
    assert len(ids) == 3


def test_search(client: Any, uid: str) -> None:
    sushi = add(client, uid, "I love sushi")
    add(client, uid, "My cat is called Tom")
    listed(client, uid, 2)
    reply = client.search("what food do I love? sushi", filters={"user_id": uid})
    hits = reply["results"]
    assert hits[0]["id"] == sushi["id"]
    assert hits[0]["memory"] == "I love sushi"
    assert 0 < hits[0]["score"] <= 1
    assert all(hit["user_id"] == uid for hit in hits)
    assert "explain" not in hits[0]
    narrowed = client.search("sushi", filters={"AND": [{"user_id": uid}, {"role": "assistant"}]})
    assert narrowed["results"] == []
    assert client.search("sushi", filters={"user_id": f"{uid}-nobody"})["results"] == []


def test_update_and_history(client: Any, uid: str) -> None:
    memory = add(client, uid, "I drive a Volvo")
    updated = client.update(memory["id"], text="I drive a Saab")
    assert (updated["id"], updated["memory"]) == (memory["id"], "I drive a Saab")
    assert "message" in updated
    assert client.get(memory["id"])["memory"] == "I drive a Saab"
    history = client.history(memory["id"])
    assert [row["event"] for row in history] == ["ADD", "UPDATE"]
    assert all(row["memory_id"] == memory["id"] for row in history)
    assert (history[0]["old_memory"], history[0]["new_memory"]) == (None, "I drive a Volvo")
    assert (history[1]["old_memory"], history[1]["new_memory"]) == (
        "I drive a Volvo",
        "I drive a Saab",
    )


def test_batch_update_and_batch_delete(client: Any, uid: str) -> None:
    first = add(client, uid, "batch one")
    second = add(client, uid, "batch two")
    reply = client.batch_update(
        [
            {"memory_id": first["id"], "text": "batch one, edited"},
            {"memory_id": second["id"], "metadata": {"edited": True}},
        ]
    )
    assert "2" in reply["message"]
    assert client.get(first["id"])["memory"] == "batch one, edited"
    assert client.get(second["id"])["metadata"] == {"edited": True}

    reply = client.batch_delete([{"memory_id": first["id"]}, {"memory_id": second["id"]}])
    assert "2" in reply["message"]
    for memory in (first, second):
        with pytest.raises(importlib.import_module("mem0.exceptions").MemoryNotFoundError):
            client.get(memory["id"])


def test_delete_and_delete_all(client: Any, uid: str) -> None:
    gone = add(client, uid, "delete me")
    add(client, uid, "delete me too")
    add(client, uid, "and me")
    assert client.delete(gone["id"]) == {"message": "Memory deleted successfully!"}
    exceptions = importlib.import_module("mem0.exceptions")
    with pytest.raises(exceptions.MemoryNotFoundError):
        client.get(gone["id"])
    assert [row["event"] for row in client.history(gone["id"])] == ["ADD", "DELETE"]
    listed(client, uid, 2)
    reply = client.delete_all(user_id=uid)
    assert reply["message"]
    assert reply.get("deleted") == 2
    listed(client, uid, 0)


def test_another_tenants_memory_is_not_found(
    client: Any, mem0: Any, uid: str, base_url: str
) -> None:
    with http_client(base_url, admin_key()) as admin:
        other = create_tenant(admin, base_url, "mem0-other")
        try:
            with other.http:
                response = other.http.post(
                    "/v1/memories",
                    params={"wait": "true"},
                    json={"messages": "not yours", "user_id": uid, "infer": False},
                )
                memory_id = response.json()["results"][0]["id"]
                exceptions = importlib.import_module("mem0.exceptions")
                with pytest.raises(exceptions.MemoryNotFoundError):
                    client.get(memory_id)
                with pytest.raises(exceptions.MemoryNotFoundError):
                    client.update(memory_id, text="mine now")
                with pytest.raises(exceptions.MemoryNotFoundError):
                    client.delete(memory_id)
                assert client.search("not yours", filters={"user_id": uid})["results"] == []
                other.http.delete("/v1/memories", params={"user_id": uid})
        finally:
            admin.delete(f"/v1/admin/keys/{other.key_id}")


def test_the_api_is_reachable_without_the_client(base_url: str) -> None:
    assert httpx.get(f"{base_url}/v1/ping/", timeout=10).status_code == 401


# --- the rest of the client: entities, exports, feedback, and what memq does not serve ------

# Every public method of mem0ai's MemoryClient, by what memq does with it (docs/API.md's table).
SERVED = {
    "add", "get", "get_all", "search", "update", "delete", "delete_all", "history",
    "batch_update", "batch_delete", "users", "delete_users", "reset", "feedback",
    "create_memory_export", "get_memory_export",
}  # fmt: skip
NOT_SERVED = {  # answered 501 with the reason
    "get_summary", "get_profile", "generate_profile", "get_profile_settings",
    "update_profile_settings", "sample_profiles", "get_profile_job", "get_project",
    "update_project", "get_webhooks", "create_webhook", "update_webhook", "delete_webhook",
}  # fmt: skip
CLIENT_SIDE = {"chat"}  # mem0's client raises NotImplementedError itself


def public_methods(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_") and callable(vars(cls)[name])}


def test_every_client_method_is_classified(mem0: Any) -> None:
    """A mem0ai release that adds a method fails here until docs/API.md's table says what memq
    does with it."""
    for cls in (mem0.MemoryClient, mem0.AsyncMemoryClient):
        assert public_methods(cls) == SERVED | NOT_SERVED | CLIENT_SIDE, cls.__name__


def entity_ids() -> dict[str, str]:
    token = uuid.uuid4().hex[:10]
    return {"user": f"u-{token}", "agent": f"a-{token}", "run": f"r-{token}"}


def add_entities(client: Any, ids: dict[str, str]) -> None:
    """Two memories of the user, one of the agent alone, one of the run alone."""
    add(client, ids["user"], "entity fact one")
    add(client, ids["user"], "entity fact two")
    reply = client.add("an agent fact", agent_id=ids["agent"], infer=False)
    assert reply["results"][0]["event"] == "ADD"
    reply = client.add("a run fact", run_id=ids["run"], infer=False)
    assert reply["results"][0]["event"] == "ADD"


def listed_entities(client: Any, names: set[str]) -> dict[str, dict[str, Any]]:
    """``users()`` once it lists every one of ``names`` (it reads a refreshed index)."""
    return wait_until(
        lambda: (
            (found := {e["name"]: e for e in client.users()["results"] if e["name"] in names})
            and set(found) == names
            and found
        ),
        f"users() listing {sorted(names)}",
    )


def test_users_lists_every_user_agent_and_run(client: Any, tenant: Tenant) -> None:
    ids = entity_ids()
    add_entities(client, ids)
    found = listed_entities(client, set(ids.values()))
    for kind, name in ids.items():
        entity = found[name]
        assert (entity["type"], entity["id"], entity["owner"]) == (kind, name, tenant.name)
        assert entity["total_memories"] == (2 if kind == "user" else 1)
        assert entity["created_at"] and entity["updated_at"]
    page = client.users()
    assert page["count"] == len(page["results"])
    for kind, name in ids.items():
        client.delete_users(**{f"{kind}_id": name})


def test_delete_users_deletes_one_entity_of_each_kind(client: Any) -> None:
    ids = entity_ids()
    add_entities(client, ids)
    listed_entities(client, set(ids.values()))
    reply = client.delete_users(user_id=ids["user"])
    assert reply == {"message": "Entity deleted successfully."}
    listed(client, ids["user"], 0)
    client.delete_users(agent_id=ids["agent"])
    client.delete_users(run_id=ids["run"])
    for kind, name in ids.items():
        assert client.get_all(filters={f"{kind}_id": name})["count"] == 0, kind
    wait_until(
        lambda: not {e["name"] for e in client.users()["results"]} & set(ids.values()),
        "the deleted entities gone from users()",
    )
    exceptions = importlib.import_module("mem0.exceptions")
    with pytest.raises(exceptions.ValidationError, match="no 'app' entities"):
        client.delete_users(app_id="an-app")


def test_reset_deletes_every_entity_of_the_tenant(mem0: Any, base_url: str) -> None:
    with temporary_tenant(base_url, "mem0-reset") as own:
        memory_client = mem0.MemoryClient(api_key=own.key, host=base_url)
        ids = entity_ids()
        add_entities(memory_client, ids)
        listed_entities(memory_client, set(ids.values()))
        reply = memory_client.reset()
        assert reply["message"].startswith("Client reset successful")
        for kind, name in ids.items():
            assert memory_client.get_all(filters={f"{kind}_id": name})["count"] == 0, kind
        wait_until(lambda: memory_client.users()["results"] == [], "an empty users() list")
        with pytest.raises(ValueError, match="No entities to delete"):
            memory_client.reset()  # mem0's client refuses to reset nothing
        memory_client.client.close()


SCHEMA = '{"type": "object", "properties": {"food": {"type": "string"}}}'


def test_memory_export_by_id_and_by_filters(client: Any, uid: str) -> None:
    first = add(client, uid, "I love ramen")
    client.update(first["id"], text="I love udon")
    add(client, uid, "I live in Bergen")
    created = client.create_memory_export(SCHEMA, filters={"user_id": uid})
    assert created["id"].startswith("exp_")
    export = client.get_memory_export(memory_export_id=created["id"])
    assert (export["id"], export["format"], export["count"]) == (created["id"], "memq-export", 2)
    assert export["selector"]["user_id"] == uid
    texts = {m["text"] for m in export["memories"]}
    assert texts == {"I love udon", "I live in Bergen"}
    udon = next(m for m in export["memories"] if m["id"] == first["id"])
    assert [row["event"] for row in udon["history"]] == ["ADD", "UPDATE"]
    assert udon["scope"]["user_id"] == uid
    again = client.get_memory_export(filters={"AND": [{"user_id": uid}]})
    assert {m["id"] for m in again["memories"]} == {m["id"] for m in export["memories"]}
    assert client.create_memory_export(SCHEMA, user_id=uid)["id"] == created["id"]


def test_memory_export_refusals(client: Any, uid: str) -> None:
    exceptions = importlib.import_module("mem0.exceptions")
    with pytest.raises(exceptions.MemoryNotFoundError, match="no export"):
        client.get_memory_export(memory_export_id="exp_bm90IGFuIGlk")
    with pytest.raises(exceptions.ValidationError, match="by user_id, agent_id and run_id"):
        client.create_memory_export(SCHEMA, filters={"user_id": uid, "role": "user"})
    with pytest.raises(exceptions.ValidationError, match="differs"):
        client.create_memory_export(SCHEMA, user_id=uid, filters={"user_id": f"{uid}-other"})


def test_an_export_id_reads_only_the_readers_tenant(
    client: Any, mem0: Any, uid: str, base_url: str
) -> None:
    add(client, uid, "mine alone")
    created = client.create_memory_export(SCHEMA, user_id=uid)
    with temporary_tenant(base_url, "mem0-export-other") as other:
        other_client = mem0.MemoryClient(api_key=other.key, host=base_url)
        assert other_client.get_memory_export(memory_export_id=created["id"])["count"] == 0
        other_client.client.close()


def test_feedback_is_recorded_on_the_memory(client: Any, uid: str) -> None:
    memory = add(client, uid, "I hate olives")
    reply = client.feedback(memory["id"], "negative", "I like them now")
    assert reply["feedback"] == "NEGATIVE"
    assert reply["feedback_reason"] == "I like them now"
    got = client.get(memory["id"])
    assert (got["feedback"], got["feedback_reason"]) == ("NEGATIVE", "I like them now")
    assert client.feedback(memory["id"], "VERY_NEGATIVE")["feedback"] == "VERY_NEGATIVE"
    assert "feedback_reason" not in client.get(memory["id"])
    client.feedback(memory["id"])  # no verdict: cleared
    assert "feedback" not in client.get(memory["id"])
    exceptions = importlib.import_module("mem0.exceptions")
    with pytest.raises(exceptions.MemoryNotFoundError):
        client.feedback(str(uuid.uuid4()), "POSITIVE")
    with pytest.raises(ValueError, match="feedback must be one of"):
        client.feedback(memory["id"], "MEH")  # mem0's client checks the verdict itself


def test_the_unserved_methods_answer_501_with_the_reason(client: Any) -> None:
    exceptions = importlib.import_module("mem0.exceptions")
    calls = {
        "get_summary": (lambda: client.get_summary(filters={"user_id": "x"}), "model call"),
        "get_profile": (lambda: client.get_profile("x"), "no user profiles"),
        "generate_profile": (lambda: client.generate_profile("x"), "no user profiles"),
        "get_project": (client.get_project, "tenant is the project"),
        "get_webhooks": (lambda: client.get_webhooks("p"), "tenant is the project"),
    }
    for name, (call, reason) in calls.items():
        with pytest.raises(exceptions.MemoryError, match=reason) as raised:
            call()
        assert raised.value.error_code == "HTTP_501", name


def test_the_async_client_serves_the_same_methods(mem0: Any, base_url: str) -> None:
    """``AsyncMemoryClient`` over every served method, in a tenant of its own (it ends with
    ``reset``)."""
    with temporary_tenant(base_url, "mem0-async") as own:
        asyncio.run(async_round(mem0, own, base_url))


async def async_round(mem0: Any, own: Tenant, base_url: str) -> None:
    ids = entity_ids()
    user = ids["user"]
    async with mem0.AsyncMemoryClient(api_key=own.key, host=base_url) as client:
        assert client.project_id == own.name
        added = (await client.add("I love sushi", user_id=user, infer=False))["results"][0]
        other = (await client.add("I have a cat", user_id=user, infer=False))["results"][0]
        await client.add("an agent fact", agent_id=ids["agent"], infer=False)
        assert (await client.get(added["id"]))["memory"] == "I love sushi"
        page = await async_wait(lambda: client.get_all(filters={"user_id": user}), 2)
        assert {m["id"] for m in page["results"]} == {added["id"], other["id"]}
        hits = (await client.search("sushi", filters={"user_id": user}))["results"]
        assert hits[0]["id"] == added["id"]
        await client.update(added["id"], text="I love udon")
        events = [row["event"] for row in await client.history(added["id"])]
        assert events == ["ADD", "UPDATE"]
        await client.batch_update([{"memory_id": other["id"], "metadata": {"pet": True}}])
        assert (await client.get(other["id"]))["metadata"] == {"pet": True}
        assert (await client.feedback(other["id"], "POSITIVE"))["feedback"] == "POSITIVE"
        assert (await client.get(other["id"]))["feedback"] == "POSITIVE"
        created = await client.create_memory_export(SCHEMA, user_id=user)
        export = await client.get_memory_export(memory_export_id=created["id"])
        assert {m["text"] for m in export["memories"]} == {"I love udon", "I have a cat"}
        await async_names(client, {user, ids["agent"]})
        exceptions = importlib.import_module("mem0.exceptions")
        with pytest.raises(exceptions.MemoryError, match="model call"):
            await client.get_summary()
        await client.batch_delete([{"memory_id": other["id"]}])
        await client.delete(added["id"])
        assert (await client.delete_all(agent_id=ids["agent"]))["deleted"] == 1
        await client.add("one more", user_id=user, infer=False)
        await async_names(client, {user})
        await client.delete_users(user_id=user)
        await client.add("and another", run_id=ids["run"], infer=False)
        await async_names(client, {ids["run"]})
        assert (await client.reset())["message"].startswith("Client reset successful")
        await async_names(client, set())
        assert (await client.get_all(filters={"run_id": ids["run"]}))["count"] == 0


async def async_wait(read: Any, count: int) -> dict[str, Any]:
    """``await read()`` until it counts ``count`` results (listing reads a refreshed index)."""
    deadline = time.monotonic() + 60
    while True:
        page: dict[str, Any] = await read()
        if len(page["results"]) == count:
            return page
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {count} results, last {page}")
        await asyncio.sleep(0.2)


async def async_names(client: Any, names: set[str]) -> None:
    """``users()`` until it names exactly ``names``."""
    deadline = time.monotonic() + 60
    while {e["name"] for e in (await client.users())["results"]} != names:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for users() to list {sorted(names)}")
        await asyncio.sleep(0.2)
