"""Current facts on the real stack: the API process, a real worker, Elasticsearch, and the
scripted model naming the memory a new fact replaces. A newer statement closes the one it
contradicts; search, listing and history answer with what is true now, ``as_of`` with what was
true then, ``include_replaced`` with both (marked); mem0's routes see an UPDATE."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from memq.client import Client
from pipeline.config import Settings
from pipeline.domain.jobs import TERMINAL_STATUSES, JobStatus
from pipeline.memory import Memory
from tests.fakellm import FakeLLMServer
from tests.integration.test_api import Tenant, listed, temporary_tenant, wait_until
from workers.runtime import Runtime

pytestmark = pytest.mark.integration

LISBON, BERLIN, PARIS = ("Maria lives in Lisbon", "Maria lives in Berlin", "Maria lives in Paris")


@pytest.fixture(scope="module")
def tenant(api_url: str) -> Iterator[Tenant]:
    with temporary_tenant(api_url, "validity") as created:
        yield created


@pytest.fixture
def uid(tenant: Tenant) -> Iterator[str]:
    user_id = f"maria-{uuid.uuid4().hex[:10]}"
    yield user_id
    tenant.http.delete("/v1/memories", params={"user_id": user_id})


def reply(text: str, replaces: str | None = None) -> str:
    fact: dict[str, Any] = {"text": text, "attributed_to": "user", "related": []}
    return json.dumps({"memory": [fact | ({"replaces_text": [replaces]} if replaces else {})]})


def told(tenant: Tenant, user_id: str, text: str, when: str) -> dict[str, Any]:
    """One conversation with its date, extracted by the scripted model; the finished job."""
    body = {"messages": [{"role": "user", "content": text, "name": "Maria"}], "user_id": user_id}
    response = tenant.http.post(
        "/v1/memories", params={"wait": "true"}, json=body | {"timestamp": when}
    )
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    assert job["status"] == JobStatus.SUCCEEDED, job
    return job


def found(tenant: Tenant, user_id: str, query: str, **extra: Any) -> dict[str, dict[str, Any]]:
    body = {"query": query, "user_id": user_id, **extra}
    response = tenant.http.post("/v1/memories/search", json=body)
    assert response.status_code == 200, response.text
    return {hit["memory"]: hit for hit in response.json()["results"]}


def test_a_newer_statement_replaces_the_one_it_contradicts(
    tenant: Tenant, uid: str, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script_chat(reply(LISBON), reply(BERLIN, replaces=LISBON))
    [lisbon] = told(tenant, uid, "I live in Lisbon", "2023-03-01T10:00:00Z")["results"]
    job = told(tenant, uid, "Big news: I moved to Berlin last month", "2024-03-01T10:00:00Z")
    [berlin] = job["results"]
    assert berlin["replaces"] == [{"id": lisbon["id"], "memory": LISBON}]
    assert job["counts"]["replaced"] == 1

    now = found(tenant, uid, "Where does Maria live now?")
    assert BERLIN in now and LISBON not in now
    then = found(tenant, uid, "Where did Maria live?", as_of="2023-12-31T00:00:00Z")
    assert LISBON in then and BERLIN not in then
    both = found(tenant, uid, "Where does Maria live?", include_replaced=True)
    assert both[LISBON]["valid_until"].startswith("2024-03-01T10:00:00")
    assert both[LISBON]["replaced_by"] == [berlin["id"]]
    assert both[BERLIN]["valid_until"] is None and both[BERLIN]["replaces"] == [lisbon["id"]]

    assert [m["memory"] for m in listed(tenant, user_id=uid)] == [BERLIN]
    everything = listed(tenant, user_id=uid, include_replaced="true")
    assert sorted(m["memory"] for m in everything) == [BERLIN, LISBON]
    past = listed(tenant, user_id=uid, as_of="2023-06-01T00:00:00Z")
    assert [m["memory"] for m in past] == [LISBON]
    replaced = listed(tenant, user_id=uid, filters=json.dumps({"valid_until": "*"}), **ALL)
    assert [m["id"] for m in replaced] == [lisbon["id"]]

    history = tenant.http.get(f"/v1/memories/{lisbon['id']}/history").json()
    assert [(r["event"], r.get("replaced_by")) for r in history] == [
        ("ADD", None),
        ("REPLACED", berlin["id"]),
    ]
    mem0_history = tenant.http.get(f"/v1/memories/{lisbon['id']}/history/").json()
    assert [(r["event"], r["old_memory"], r["new_memory"]) for r in mem0_history][1] == (
        "UPDATE",
        LISBON,
        BERLIN,
    )


ALL = {"include_replaced": "true"}


def test_mem0s_add_reports_a_replacement_as_an_update_with_the_previous_memory(
    tenant: Tenant, uid: str, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script_chat(reply(BERLIN), reply(PARIS, replaces=BERLIN))
    told(tenant, uid, "I live in Berlin", "2024-03-01T10:00:00Z")
    body = {"messages": [{"role": "user", "content": "I moved to Paris"}], "user_id": uid}
    response = tenant.http.post("/v3/memories/add/", json=body | {"timestamp": 1735725600})
    assert response.status_code == 200, response.text
    [result] = response.json()["results"]
    assert result == {
        "id": result["id"],
        "memory": PARIS,
        "event": "UPDATE",
        "previous_memory": BERLIN,
    }
    assert [m["memory"] for m in listed(tenant, user_id=uid)] == [PARIS]
    page = tenant.http.post("/v3/memories/", json={"filters": {"user_id": uid}})
    assert page.status_code == 200, page.text
    assert (page.json()["count"], [m["memory"] for m in page.json()["results"]]) == (1, [PARIS])


def test_two_sessions_replacing_one_memory_at_once_both_land(
    tenant: Tenant, uid: str, fake_llm: FakeLLMServer
) -> None:
    """Jobs of different sessions are not ordered. Lisbon was said in run ``s0``; the user's
    own session and run ``s0`` both see it, each names it as replaced, the two jobs run side by
    side, and both replacements land (no lost update); Lisbon ends at the earlier time."""
    fake_llm.script_chat(reply(LISBON), reply(BERLIN, replaces=LISBON), reply(PARIS, LISBON))
    message = {"role": "user", "content": "I live in Lisbon", "name": "Maria"}
    body = {"messages": [message], "user_id": uid, "run_id": "s0"}
    response = tenant.http.post(
        "/v1/memories", params={"wait": "true"}, json=body | {"timestamp": "2023-03-01T10:00:00Z"}
    )
    assert response.json()["status"] == JobStatus.SUCCEEDED, response.text
    [lisbon] = response.json()["results"]
    accepted = []
    for run, text, when in [
        (None, "I moved to Berlin", "2024-03-01T10:00:00Z"),
        ("s0", "I moved to Paris", "2024-06-01T10:00:00Z"),
    ]:
        message = {"role": "user", "content": text, "name": "Maria"}
        body = {"messages": [message], "user_id": uid, "run_id": run, "timestamp": when}
        response = tenant.http.post("/v1/memories", json=body)
        assert response.status_code == 202, response.text
        accepted.append(response.json()["job_id"])
    jobs = [wait_done(tenant, job_id) for job_id in accepted]
    assert [job["status"] for job in jobs] == [JobStatus.SUCCEEDED] * 2, jobs
    assert [job["counts"]["replaced"] for job in jobs] == [1, 1], jobs
    newer = sorted(result["id"] for job in jobs for result in job["results"])
    both = found(tenant, uid, "Where does Maria live?", include_replaced=True)
    assert sorted(both[LISBON]["replaced_by"]) == newer
    assert both[LISBON]["valid_until"].startswith("2024-03-01T10:00:00")
    assert LISBON not in found(tenant, uid, "Where does Maria live now?")
    history = tenant.http.get(f"/v1/memories/{lisbon['id']}/history").json()
    assert sorted(r.get("replaced_by") or "" for r in history if r["event"] == "REPLACED") == newer


def wait_done(tenant: Tenant, job_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        job: dict[str, Any] = tenant.http.get(f"/v1/jobs/{job_id}").json()
        return job if job["status"] in TERMINAL_STATUSES else None

    return wait_until(ended, f"job {job_id} to end")


def test_a_bad_as_of_is_a_clear_422(tenant: Tenant, uid: str) -> None:
    body = {"query": "where", "user_id": uid, "as_of": "not a time"}
    response = tenant.http.post("/v1/memories/search", json=body)
    assert response.status_code == 422 and "as_of" in response.text
    listing = tenant.http.get("/v1/memories", params={"user_id": uid, "as_of": "yesterday"})
    assert listing.status_code == 422 and "as_of" in listing.text


def test_the_sdk_and_the_facade_ask_for_the_past_and_for_replaced_memories(
    tenant: Tenant, uid: str, fake_llm: FakeLLMServer, api_url: str, settings: Settings
) -> None:
    fake_llm.script_chat(reply(LISBON), reply(BERLIN, replaces=LISBON))
    told(tenant, uid, "I live in Lisbon", "2023-03-01T10:00:00Z")
    told(tenant, uid, "I moved to Berlin", "2024-03-01T10:00:00Z")
    with Client(api_url, tenant.key) as client:
        assert [h.memory for h in client.search("where does she live", user_id=uid)] == [BERLIN]
        both = {h.memory: h for h in client.search("live", user_id=uid, include_replaced=True)}
        lisbon = both[LISBON]
        assert lisbon.valid_until == datetime(2024, 3, 1, 10, tzinfo=UTC)
        assert lisbon.replaced_by == [both[BERLIN].id]
        then = client.search("live", user_id=uid, as_of=datetime(2023, 6, 1, tzinfo=UTC))
        assert [h.memory for h in then] == [LISBON]
        assert [m.memory for m in client.get_all(user_id=uid)] == [BERLIN]
        past = client.get_all(user_id=uid, as_of=datetime(2023, 6, 1, tzinfo=UTC))
        assert [m.memory for m in past] == [LISBON]
        every = client.page(user_id=uid, include_replaced=True).results
        assert {m.memory: m.replaced_by for m in every} == {
            LISBON: [both[BERLIN].id],
            BERLIN: None,
        }
    facade = Memory(Runtime(settings).deps, tenant=tenant.name)
    assert [m["memory"] for m in facade.get_all(user_id=uid)["results"]] == [BERLIN]
    past = facade.search("live", user_id=uid, as_of=datetime(2023, 6, 1, tzinfo=UTC))
    assert [m["memory"] for m in past["results"]] == [LISBON]
    every = facade.get_all(user_id=uid, include_replaced=True)["results"]
    assert sorted(m["memory"] for m in every) == [BERLIN, LISBON]
    assert [r["event"] for r in facade.history(lisbon.id)] == ["ADD", "UPDATE"]


def test_raw_turns_answer_the_present_with_the_newer_statement_and_the_past_with_the_older(
    tenant: Tenant, uid: str
) -> None:
    said = [
        ("I live in Lisbon, I love it here.", "2023-04-02T10:00:00Z"),
        ("I adopted a kitten called Miso.", "2023-09-12T10:00:00Z"),
        ("Big news: I moved to Berlin last month.", "2024-05-20T10:00:00Z"),
    ]
    for text, when in said:
        body = {
            "messages": [{"role": "user", "content": text, "name": "Maria"}],
            "user_id": uid,
            "infer": False,
            "timestamp": when,
        }
        response = tenant.http.post("/v1/memories", params={"wait": "true"}, json=body)
        assert response.status_code == 200 and response.json()["status"] == JobStatus.SUCCEEDED
    asked = {"reference_time": "2025-01-15T00:00:00Z", "explain": True}

    def order(query: str) -> list[str]:
        body = {"query": query, "user_id": uid, **asked}
        hits = tenant.http.post("/v1/memories/search", json=body).json()["results"]
        return [h["memory"] for h in hits if "Lisbon" in h["memory"] or "Berlin" in h["memory"]]

    for query in ("Where does Maria live now?", "Where does Maria live?"):
        assert order(query) == [said[2][0], said[0][0]], query
    assert order("Where did Maria live in 2023?")[0] == said[0][0]
