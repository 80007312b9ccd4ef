"""Export and import on the real stack: memories made by the real pipeline (API process and
worker), dumped with ``memq export`` or ``GET /v1/export``, removed, restored with
``memq import``, then searched again through the API."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from pipeline.domain.jobs import JobStatus
from pipeline.store.indices import IndexNames
from tests.integration.test_key_cache import counted
from tests.processes import ApiProcess, WorkerProcess

pytestmark = pytest.mark.integration

FACTS = {
    "u1": [
        "I am allergic to peanuts",
        "My sister Ana lives in Lisbon",
        "I work as a nurse at the city hospital",
        "My favourite film is Spirited Away",
    ],
    "u2": ["I play the cello in an orchestra", "My dog Rex is a border collie"],
}
QUERIES = [
    ("u1", "what food allergy do I have?"),
    ("u1", "where does my sister live?"),
    ("u1", "what is my job?"),
    ("u2", "which instrument do I play?"),
    ("u2", "tell me about my dog"),
]


class Tenant:
    def __init__(self, name: str, key: str, url: str) -> None:
        self.name = name
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=90
        )

    def remember(self, user: str, text: str, **extra: Any) -> str:
        body = {"messages": text, "user_id": user, "infer": False, **extra}
        response = self.http.post("/v1/memories", params={"wait": "true"}, json=body)
        assert response.status_code == 200, response.text
        job = response.json()
        assert job["status"] == JobStatus.SUCCEEDED, job
        return str(job["results"][0]["id"])

    def search(self, user: str, query: str) -> list[tuple[str, str, float]]:
        body = {"query": query, "user_id": user, "top_k": 3}
        response = self.http.post("/v1/memories/search", json=body)
        assert response.status_code == 200, response.text
        return [(h["id"], h["memory"], h["score"]) for h in response.json()["results"]]

    def ids(self, user: str) -> list[str]:
        response = self.http.get("/v1/memories", params={"user_id": user, "page_size": 1000})
        assert response.status_code == 200, response.text
        return sorted(item["id"] for item in response.json()["results"])

    def provenance(self, memory_id: str) -> dict[str, Any]:
        response = self.http.get(f"/v1/memories/{memory_id}", params={"include": "sources"})
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()["provenance"]
        return found

    def forget(self, user: str) -> None:
        response = self.http.delete("/v1/memories", params={"user_id": user})
        assert response.status_code == 200, response.text


OPEN: list[Tenant] = []


def new_tenant(es: Elasticsearch, indices: IndexNames, api: ApiProcess) -> Tenant:
    """A tenant of its own with a key; its HTTP client is closed when the module ends."""
    name = f"exp-{uuid.uuid4().hex[:8]}"
    _, key = counted(es, indices).create(name, "export tests", datetime.now(UTC))
    OPEN.append(Tenant(name, key, api.url))
    return OPEN[-1]


@pytest.fixture(scope="module")
def seeded(
    es: Elasticsearch, indices: IndexNames, api_process: ApiProcess, worker: WorkerProcess
) -> Iterator[tuple[Tenant, dict[str, str]]]:
    """A tenant with memories of two users made by the pipeline, one of them edited since."""
    tenant = new_tenant(es, indices, api_process)
    ids = {text: tenant.remember(user, text) for user, texts in FACTS.items() for text in texts}
    nurse = ids["I work as a nurse at the city hospital"]
    response = tenant.http.put(
        f"/v1/memories/{nurse}",
        json={"text": "I work as a nurse at the children's hospital", "metadata": {"k": "v"}},
    )
    assert response.status_code == 200, response.text
    yield tenant, ids
    while OPEN:
        OPEN.pop().http.close()


@pytest.fixture
def pair(es: Elasticsearch, indices: IndexNames, api_process: ApiProcess) -> tuple[Tenant, Tenant]:
    """Two fresh tenants: a dump's source and the one it is imported into."""
    return new_tenant(es, indices, api_process), new_tenant(es, indices, api_process)


def memq(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memq.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def read_dump(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def same_results(before: list[tuple[str, str, float]], after: list[tuple[str, str, float]]) -> None:
    assert [(i, m) for i, m, _ in after] == [(i, m) for i, m, _ in before]
    for (_, _, old), (_, _, new) in zip(before, after, strict=True):
        assert new == pytest.approx(old, abs=0.05)


def test_export_reset_import_gives_the_same_search_results(
    seeded: tuple[Tenant, dict[str, str]], test_env: dict[str, str], tmp_path: Path
) -> None:
    tenant, ids = seeded
    before = {q: tenant.search(user, q) for user, q in QUERIES}
    assert all(before.values())
    listed = {user: tenant.ids(user) for user in FACTS}
    dump = tmp_path / "dump.jsonl"

    done = memq(
        test_env, "export", "--tenant", tenant.name, "--history", "--vectors", "-o", str(dump)
    )
    assert done.returncode == 0, done.stderr
    lines = read_dump(dump)
    assert lines[0]["type"] == "header" and lines[0]["embedding_model"] == "all-MiniLM-L6-v2"
    assert lines[-1] == {"type": "end", "memories": 6}
    memories = {line["id"]: line for line in lines[1:-1]}
    assert set(memories) == set(ids.values())
    edited = memories[ids["I work as a nurse at the city hospital"]]
    assert edited["text"] == "I work as a nurse at the children's hospital"
    assert edited["metadata"] == {"k": "v"}
    assert [row["event"] for row in edited["history"]] == ["ADD", "UPDATE"]
    assert len(edited["embedding"]) == 384
    lisbon = memories[ids["My sister Ana lives in Lisbon"]]
    assert {"ana", "lisbon"} <= {e["normalized"] for e in lisbon["entities"]}
    sources = tenant.provenance(lisbon["id"])
    assert [s["content"] for s in sources["sources"]] == ["My sister Ana lives in Lisbon"]
    assert lisbon["source_ids"] == [s["id"] for s in sources["sources"]]
    assert lisbon["job_id"] == sources["job"]["id"] and lisbon["turn"] == 0

    for user in FACTS:
        tenant.forget(user)
    assert all(not tenant.search(user, q) for user, q in QUERIES)

    done = memq(test_env, "import", str(dump))
    assert done.returncode == 0, done.stderr
    assert "imported 6 memories" in done.stderr and "vectors reused" in done.stderr
    for user, query in QUERIES:
        same_results(before[query], tenant.search(user, query))
    assert {user: tenant.ids(user) for user in FACTS} == listed
    assert tenant.provenance(lisbon["id"]) == sources  # the messages outlived the memories

    again = memq(test_env, "import", str(dump))  # idempotent on the memory ids
    assert again.returncode == 0, again.stderr
    assert {user: tenant.ids(user) for user in FACTS} == listed
    history = tenant.http.get(f"/v1/memories/{edited['id']}/history").json()
    assert [row["event"] for row in history].count("UPDATE") == 1


def test_api_export_into_another_tenant_recomputes_vectors(
    seeded: tuple[Tenant, dict[str, str]],
    es: Elasticsearch,
    indices: IndexNames,
    api_process: ApiProcess,
    test_env: dict[str, str],
    tmp_path: Path,
) -> None:
    source, _ = seeded
    with source.http.stream("GET", "/v1/export", params={"user_id": "u1"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        text = "".join(response.iter_text())
    dump = tmp_path / "u1.jsonl"
    dump.write_text(text)
    lines = read_dump(dump)
    assert lines[0]["vectors"] is False and "embedding" not in lines[1]
    assert {line["scope"]["user_id"] for line in lines[1:-1]} == {"u1"}
    assert lines[-1] == {"type": "end", "memories": 4}

    target = new_tenant(es, indices, api_process)
    done = memq(test_env, "import", str(dump), "--tenant", target.name)
    assert done.returncode == 0, done.stderr
    assert "vectors computed" in done.stderr
    for user, query in QUERIES:
        if user == "u1":
            expected = [(m, s) for _, m, s in source.search(user, query)]
            got = [(m, s) for _, m, s in target.search(user, query)]
            assert [m for m, _ in got] == [m for m, _ in expected]
    assert not set(target.ids("u1")) & set(source.ids("u1"))  # ids mapped into the new tenant
    assert target.ids("u2") == []


def test_api_export_is_only_the_keys_tenant(
    seeded: tuple[Tenant, dict[str, str]],
    es: Elasticsearch,
    indices: IndexNames,
    api_process: ApiProcess,
) -> None:
    other = new_tenant(es, indices, api_process)
    other.remember("u1", "I live on a boat")
    response = other.http.get("/v1/export", params={"history": "true"})
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert response.status_code == 200
    assert lines[0]["tenant"] == other.name
    assert [line["text"] for line in lines[1:-1]] == ["I live on a boat"]
    assert lines[-1] == {"type": "end", "memories": 1}
    bad = other.http.get("/v1/export", params={"user_id": "has space"})
    assert bad.status_code == 422
    anonymous = httpx.get(f"{api_process.url}/v1/export", timeout=30)
    assert anonymous.status_code == 401


def dump_lines(tenant: str, memories: list[dict[str, Any]], **header: Any) -> list[str]:
    head = {
        "type": "header",
        "format": "memq-export",
        "version": 1,
        "tenant": tenant,
        "selector": {"tenant": tenant},
        "history": False,
        "vectors": False,
        "exported_at": "2026-01-01T00:00:00+00:00",
        **header,
    }
    end = {"type": "end", "memories": len(memories)}
    return [json.dumps(line) for line in (head, *memories, end)]


def memory(tenant: str, n: int, **extra: Any) -> dict[str, Any]:
    return {
        "type": "memory",
        "id": f"m-{uuid.uuid4().hex}",
        "text": f"fact number {n}",
        "scope": {"tenant": tenant, "user_id": "u1"},
        "hash": f"h{n}",
        "created_at": "2026-01-01T00:00:00+00:00",
        **extra,
    }


def test_bad_dumps_are_refused_with_a_message_and_write_nothing(
    seeded: tuple[Tenant, dict[str, str]],
    es: Elasticsearch,
    indices: IndexNames,
    api_process: ApiProcess,
    test_env: dict[str, str],
    tmp_path: Path,
) -> None:
    source, ids = seeded
    target = new_tenant(es, indices, api_process)
    name = target.name
    good = [memory(name, n) for n in range(3)]
    ours = {"vectors": True, "embedding_model": "all-MiniLM-L6-v2", "dims": 384}
    cases: dict[str, tuple[list[str], str]] = {
        "malformed": (
            [*dump_lines(name, good)[:2], "{not json", *dump_lines(name, good)[2:]],
            "line 3: not valid JSON",
        ),
        "cut": (dump_lines(name, good)[:-1], "no end line: it was cut short"),
        "count": ([*dump_lines(name, good)[:-1], '{"type":"end","memories":7}'], "counts 7"),
        "not-a-dump": (['{"hello": "world"}'], "not a memq export"),
        "empty": ([], "empty"),
        "field": (dump_lines(name, [memory(name, 1, text="")]), "line 2: text"),
        "wrong-model": (
            dump_lines(name, [memory(name, 1, embedding=[0.1, 0.2, 0.3])], **ours),
            "a vector of 3 numbers, but the header says all-MiniLM-L6-v2 makes 384",
        ),
        "no-model": (
            dump_lines(name, [memory(name, 1, embedding=[0.1])], vectors=True),
            "does not name their model",
        ),
        "mixed-tenant": (
            dump_lines(name, [*good, memory("someone-else", 9)]),
            "memory of tenant 'someone-else'",
        ),
    }
    for case, (lines, says) in cases.items():
        path = tmp_path / f"{case}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        done = memq(test_env, "import", str(path))
        assert done.returncode == 2, (case, done.stderr)
        assert says in done.stderr, (case, done.stderr)
        assert "Traceback" not in done.stderr
    missing = memq(test_env, "import", str(tmp_path / "nowhere.jsonl"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    done = memq(test_env, "import", str(binary))
    assert done.returncode == 2 and "not UTF-8" in done.stderr, done.stderr
    assert target.ids("u1") == []

    # ids of another tenant's memories are never overwritten
    stolen = memory(name, 1, id=ids["I am allergic to peanuts"], text="I love peanuts")
    path = tmp_path / "stolen.jsonl"
    path.write_text("\n".join(dump_lines(name, [stolen])) + "\n")
    done = memq(test_env, "import", str(path))
    assert done.returncode == 2 and "belongs to another tenant" in done.stderr, done.stderr
    kept = source.http.get(f"/v1/memories/{ids['I am allergic to peanuts']}").json()
    assert kept["memory"] == "I am allergic to peanuts"

    # a dump of another model's vectors is taken, its vectors computed again
    other = [memory(name, n, embedding=[0.5, 0.5]) for n in range(2)]
    path = tmp_path / "other-model.jsonl"
    path.write_text(
        "\n".join(
            dump_lines(name, other, vectors=True, embedding_model="text-embedding-3-small", dims=2)
        )
        + "\n"
    )
    done = memq(test_env, "import", str(path))
    assert done.returncode == 0, done.stderr
    assert "vectors computed with all-MiniLM-L6-v2" in done.stderr
    assert [h[1] for h in target.search("u1", "fact number 1")][:1] == ["fact number 1"]


def test_export_refuses_bad_options(test_env: dict[str, str]) -> None:
    done = memq(test_env, "export", "--tenant", "has space")
    assert done.returncode == 2 and "tenant" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_validity_travels_through_import_and_export_with_its_ids_mapped(
    pair: tuple[Tenant, Tenant], test_env: dict[str, str], tmp_path: Path
) -> None:
    source, target = pair
    old = memory(source.name, 1, observed_at="2023-01-01T00:00:00+00:00")
    new = memory(source.name, 2, observed_at="2024-01-01T00:00:00+00:00")
    old |= {"valid_until": "2024-01-01T00:00:00+00:00", "replaced_by": [new["id"]]}
    new |= {"replaces": [old["id"]]}
    dump = tmp_path / "validity.jsonl"
    dump.write_text("\n".join(dump_lines(source.name, [old, new])) + "\n")
    done = memq(test_env, "import", str(dump), "--tenant", target.name)
    assert done.returncode == 0, done.stderr
    params = {"user_id": "u1", "include_replaced": "true"}
    listed = target.http.get("/v1/memories", params=params).json()["results"]
    by_text = {m["memory"]: m for m in listed}
    replaced, current = by_text["fact number 1"], by_text["fact number 2"]
    assert replaced["replaced_by"] == [current["id"]] and current["replaces"] == [replaced["id"]]
    assert replaced["valid_until"].startswith("2024-01-01") and current["valid_until"] is None
    now = target.http.get("/v1/memories", params={"user_id": "u1"}).json()["results"]
    assert [m["memory"] for m in now] == ["fact number 2"]
    exported = target.http.get("/v1/export").text.splitlines()
    lines = {line["text"]: line for line in map(json.loads, exported[1:-1])}
    assert lines["fact number 1"]["replaced_by"] == [current["id"]]
    assert lines["fact number 1"]["valid_until"].startswith("2024-01-01")
    for tenant in (source, target):
        tenant.http.close()


def test_sources_travel_with_the_dump_and_come_back_after_an_erasure(
    pair: tuple[Tenant, Tenant], test_env: dict[str, str], tmp_path: Path
) -> None:
    source, target = pair
    said = "I brew my own ginger beer"
    memory_id = source.remember("u9", said)
    before = source.provenance(memory_id)
    dump = tmp_path / "sources.jsonl"
    dump.write_text(source.http.get("/v1/export", params={"sources": "true"}).text)
    [line] = read_dump(dump)[1:-1]
    assert [m["content"] for m in line["sources"]] == [said]
    assert read_dump(dump)[0]["sources"] is True

    erased = source.http.delete("/v1/users/u9")  # the messages go with the memories
    assert erased.status_code == 200 and erased.json()["erased"]["messages"] >= 1
    done = memq(test_env, "import", str(dump))
    assert done.returncode == 0, done.stderr
    assert "1 source messages" in done.stderr
    after = source.provenance(memory_id)
    assert after["sources"] == before["sources"] and after["known"] and after["missing"] == 0
    assert after["job"] == {"id": before["job"]["id"], "status": None} | {
        "created_at": None,
        "finished_at": None,
    }  # the job's record went with the user: its id is what is left

    done = memq(test_env, "import", str(dump), "--tenant", target.name)
    assert done.returncode == 0, done.stderr
    [copied] = target.http.get("/v1/memories", params={"user_id": "u9"}).json()["results"]
    moved = target.provenance(copied["id"])
    assert [(m["content"], m["seq"]) for m in moved["sources"]] == [(said, 0)]
    assert moved["sources"][0]["id"] != before["sources"][0]["id"]
    assert moved["job"]["id"] == before["job"]["id"] and moved["missing"] == 0
