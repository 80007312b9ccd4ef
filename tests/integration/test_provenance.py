"""Provenance on the real stack (API process, real worker, Elasticsearch, the scripted model):
a memory names the messages it came from and the job that wrote it, through
``GET /v1/memories/{id}?include=sources`` and mem0's route; a replacement keeps each memory's
own sources, erasing the user leaves nothing pointing at its messages, and a memory stored
before sources were recorded still reads."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from pipeline.domain.jobs import JobStatus
from pipeline.domain.models import message_id
from pipeline.store.indices import IndexNames
from tests.fakellm import FakeLLMServer
from tests.integration.test_api import Tenant, temporary_tenant

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tenant(api_url: str) -> Iterator[Tenant]:
    with temporary_tenant(api_url, "provenance") as created:
        yield created


@pytest.fixture
def uid(tenant: Tenant) -> Iterator[str]:
    user_id = f"ana-{uuid.uuid4().hex[:10]}"
    yield user_id
    tenant.http.delete(f"/v1/users/{user_id}")


def added(tenant: Tenant, body: dict[str, Any]) -> dict[str, Any]:
    response = tenant.http.post("/v1/memories", params={"wait": "true"}, json=body)
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    assert job["status"] == JobStatus.SUCCEEDED, job
    return job


def provenance(tenant: Tenant, memory_id: str, path: str = "/v1/memories/{}") -> dict[str, Any]:
    response = tenant.http.get(path.format(memory_id), params={"include": "sources"})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body["provenance"]


def facts(*texts: str, replaces: str | None = None) -> str:
    extra = {"replaces_text": [replaces]} if replaces else {}
    return json.dumps({"memory": [{"text": t, "attributed_to": "user"} | extra for t in texts]})


CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "I moved to Porto and I adopted a cat", "name": "Ana"},
    {"role": "assistant", "content": "Congratulations on both!"},
]


def test_an_extracted_memory_names_the_jobs_messages_and_the_job(
    tenant: Tenant, uid: str, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script_chat(facts("Ana lives in Porto", "Ana has a cat"))
    job = added(tenant, {"messages": CONVERSATION, "user_id": uid})
    porto, cat = job["results"]
    seen = provenance(tenant, porto["id"])
    assert seen["known"] and seen["missing"] == 0
    assert seen["job"]["id"] == job["job_id"] and seen["job"]["status"] == "succeeded"
    # every message the model was given as new, in their order, as they were said
    assert [(s["seq"], s["role"], s["content"]) for s in seen["sources"]] == [
        (n, m["role"], m["content"]) for n, m in enumerate(CONVERSATION)
    ]
    assert [s["id"] for s in seen["sources"]] == [message_id(job["job_id"], n) for n in range(3)]
    assert seen["sources"][1]["name"] == "Ana" and seen["sources"][1]["timestamp"]
    assert all(s["job_id"] == job["job_id"] for s in seen["sources"])
    assert provenance(tenant, cat["id"])["sources"] == seen["sources"]

    plain = tenant.http.get(f"/v1/memories/{porto['id']}").json()
    assert plain["provenance"] is None  # only when asked for
    mem0 = provenance(tenant, porto["id"], "/v1/memories/{}/")
    assert [s["id"] for s in mem0["sources"]] == [s["id"] for s in seen["sources"]]
    bad = tenant.http.get(f"/v1/memories/{porto['id']}", params={"include": "everything"})
    assert bad.status_code in (400, 422), bad.text


def test_a_raw_turn_is_its_own_source(tenant: Tenant, uid: str) -> None:
    body = {"messages": CONVERSATION, "user_id": uid, "infer": False}
    job = added(tenant, body)
    by_text = {r["memory"]: r["id"] for r in job["results"]}
    assert set(by_text) == {CONVERSATION[1]["content"], CONVERSATION[2]["content"]}
    for seq in (1, 2):
        [source] = provenance(tenant, by_text[CONVERSATION[seq]["content"]])["sources"]
        assert source["id"] == message_id(job["job_id"], seq) and source["seq"] == seq
        assert source["content"] == CONVERSATION[seq]["content"]
        assert source["role"] == CONVERSATION[seq]["role"]


def test_a_replacement_keeps_each_memorys_own_sources(
    tenant: Tenant, uid: str, fake_llm: FakeLLMServer
) -> None:
    lisbon, berlin = "Ana lives in Lisbon", "Ana lives in Berlin"
    fake_llm.script_chat(facts(lisbon), facts(berlin, replaces=lisbon))
    said = [{"role": "user", "content": "I live in Lisbon"}]
    first = added(tenant, {"messages": said, "user_id": uid})
    moved = [{"role": "user", "content": "I moved to Berlin"}]
    second = added(tenant, {"messages": moved, "user_id": uid})
    [old], [new] = first["results"], second["results"]
    assert new["replaces"] == [{"id": old["id"], "memory": lisbon}]
    old_sources = provenance(tenant, old["id"])
    new_sources = provenance(tenant, new["id"])
    assert [s["content"] for s in old_sources["sources"]] == ["I live in Lisbon"]
    assert old_sources["job"]["id"] == first["job_id"]
    assert [s["content"] for s in new_sources["sources"]] == ["I moved to Berlin"]
    assert new_sources["job"]["id"] == second["job_id"]


def test_erasure_leaves_no_provenance_to_the_users_messages(
    tenant: Tenant, uid: str, es: Elasticsearch, indices: IndexNames
) -> None:
    said = [{"role": "user", "content": f"my locker code is {uuid.uuid4().hex[:6]}"}]
    job = added(tenant, {"messages": said, "user_id": uid, "agent_id": "desk", "infer": False})
    [memory] = job["results"]
    [source] = provenance(tenant, memory["id"])["sources"]
    bystander = f"bo-{uuid.uuid4().hex[:10]}"
    other = added(tenant, {"messages": said, "user_id": bystander, "infer": False})

    erased = tenant.http.delete(f"/v1/users/{uid}")
    assert erased.status_code == 200, erased.text
    assert erased.json()["erased"]["messages"] >= 1
    assert tenant.http.get(f"/v1/memories/{memory['id']}").status_code == 404
    es.indices.refresh(index=[indices.memories, indices.messages])
    pointing = es.count(index=indices.memories, query={"term": {"source_ids": source["id"]}})
    assert pointing["count"] == 0
    gone = es.count(index=indices.messages, query={"ids": {"values": [source["id"]]}})
    assert gone["count"] == 0
    kept = provenance(tenant, other["results"][0]["id"])  # the bystander's are untouched
    assert [s["content"] for s in kept["sources"]] == [said[0]["content"]]
    tenant.http.delete(f"/v1/users/{bystander}")


def test_a_memory_stored_before_sources_were_recorded_reads_as_unknown(
    tenant: Tenant, uid: str, es: Elasticsearch, indices: IndexNames
) -> None:
    said = [{"role": "user", "content": "I like green tea"}]
    job = added(tenant, {"messages": said, "user_id": uid, "infer": False})
    [memory] = job["results"]
    [hit] = es.search(index=indices.memories, query={"ids": {"values": [memory["id"]]}})["hits"][
        "hits"
    ]
    old_style = {k: v for k, v in hit["_source"].items() if k != "source_ids"}
    assert old_style != hit["_source"]
    es.index(
        index=hit["_index"],
        id=memory["id"],
        routing=hit["_routing"],
        document=old_style,
        refresh=True,
    )
    seen = provenance(tenant, memory["id"])
    assert seen == {
        "known": False,
        "job": seen["job"],
        "sources": [],
        "missing": 0,
    }
    assert seen["job"]["id"] == job["job_id"]
