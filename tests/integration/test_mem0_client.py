"""The ``mem0ai`` hosted client (``MemoryClient``), unchanged, against memq's mem0 routes over
real HTTP: an application written for mem0's platform works against memq.

``mem0ai`` comes with the dev extras; without it these tests fail (they never skip). Telemetry is
off and mem0's state directory is a temporary one, both set before ``mem0`` is imported.
"""

from __future__ import annotations

import importlib
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
    own_tenant,
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
    with own_tenant(base_url, "mem0") as created:
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
