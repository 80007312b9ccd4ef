"""``memq reprocess --reextract`` on the real stack: a worker and an API process of their own
(their own index prefix and queues), extracting with one scripted model ("Old: ..."), whose
tenant is re-extracted with another ("New: ...") while adds and searches go on. Every job's
conversation is in the new version, in the new model's words, with its sources; hand edits and
deletes hold; another tenant is untouched; no add is lost and no search fails. A second test
kills the command halfway (SIGKILL) and runs it again: the resumed run replays only the rest."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from memq.cli import main
from pipeline.config import Settings
from pipeline.domain.jobs import JobStatus
from pipeline.store.indices import IndexNames
from tests.fakellm import FakeLLMServer
from tests.integration.private_stack import private_stack
from tests.integration.test_api import Tenant, create_tenant, wait_until
from tests.integration.test_reprocess import ReprocessProcess, finished
from tests.integration.test_reprocess import add as send

pytestmark = pytest.mark.integration

SESSIONS, TURNS = 4, 5  # jobs seeded per tenant: SESSIONS * TURNS


def said(request: dict[str, Any]) -> list[str]:
    """The lines 'note: ...' among the new messages of an extraction prompt."""
    prompt = request["messages"][-1]["content"]
    return re.findall(r"note: ([^\n]+)", prompt.split("New messages:", 1)[-1])


def model(prefix: str) -> Any:
    def reply(request: dict[str, Any]) -> str:
        facts = [{"text": f"{prefix}: {line}", "attributed_to": "user"} for line in said(request)]
        return json.dumps({"memory": facts})

    return reply


@dataclass
class Stack:
    env: dict[str, str]
    names: IndexNames
    tenant: Tenant
    bystander: Tenant
    admin: httpx.Client
    old: FakeLLMServer
    new: FakeLLMServer
    logs: Path


@pytest.fixture
def stack(
    test_env: dict[str, str], settings: Settings, es: Elasticsearch, tmp_path: Path
) -> Iterator[Stack]:
    """A worker and an API over a prefix and queues of their own, extracting with ``old``."""
    with FakeLLMServer(dims=64) as old, FakeLLMServer(dims=64) as new:
        old.responder, new.responder = model("Old"), model("New")
        models = {
            "MEMQ_LLM_BASE_URL": old.base_url,
            "MEMQ_LLM_MODEL": "old-model",
            "MEMQ_EMBEDDER_KIND": "openai",
            "MEMQ_EMBEDDER_MODEL": "embedder",
            "MEMQ_EMBEDDER_DIMS": "64",
            "MEMQ_EMBEDDER_BASE_URL": old.base_url,
        }
        with private_stack(test_env, settings, es, tmp_path, "rx", models) as private:
            tenant = create_tenant(private.admin, private.api_url, "reextract")
            bystander = create_tenant(private.admin, private.api_url, "bystander")
            yield Stack(private.env, private.names, tenant, bystander, private.admin, old, new,
                        tmp_path)  # fmt: skip
            tenant.http.close()
            bystander.http.close()


def command_env(stack: Stack) -> dict[str, str]:
    """The command's environment: the new model, the same embedder."""
    return {**stack.env, "MEMQ_LLM_BASE_URL": stack.new.base_url, "MEMQ_LLM_MODEL": "new-model"}


def add(tenant: Tenant, text: str, user_id: str, run_id: str, infer: bool = True) -> str:
    """Send one conversation (a 503 is retried); its status URL."""
    return send(tenant, text, user_id, run_id=run_id, infer=infer)


def seed(tenant: Tenant) -> list[str]:
    """SESSIONS sessions of TURNS jobs, each job one note; the notes."""
    notes = [f"note {s}.{t} {uuid.uuid4().hex[:6]}" for s in range(SESSIONS) for t in range(TURNS)]
    urls = [add(tenant, f"note: {n}", "u", f"s{n.split('.')[0][-1]}") for n in notes]
    for url in urls:
        assert finished(tenant, url)["status"] == JobStatus.SUCCEEDED
    return notes


def memories(tenant: Tenant, user_id: str = "u") -> dict[str, str]:
    """A user's memories: text -> id."""
    response = tenant.http.get("/v1/memories", params={"user_id": user_id, "page_size": 1000})
    assert response.status_code == 200, response.text
    return {m["memory"]: m["id"] for m in response.json()["results"]}


@dataclass
class Traffic:
    """Adds (the old model extracts them) and searches in threads until ``stop``."""

    tenant: Tenant
    stop: threading.Event = field(default_factory=threading.Event)
    added: dict[str, str] = field(default_factory=dict)  # note -> status URL
    searches: int = 0
    failed_searches: list[str] = field(default_factory=list)

    def adding(self) -> None:
        i = 0
        while not self.stop.is_set():
            note = f"live {i} {uuid.uuid4().hex[:6]}"
            self.added[note] = add(self.tenant, f"note: {note}", "u", "live")
            i += 1
            time.sleep(0.1)

    def searching(self) -> None:
        while not self.stop.is_set():
            body = {"query": "note", "user_id": "u", "top_k": 3}
            response = self.tenant.http.post("/v1/memories/search", json=body)
            self.searches += 1
            if response.status_code != 200:
                self.failed_searches.append(f"HTTP {response.status_code} {response.text[:200]}")


def check_new_version(
    stack: Stack,
    notes: list[str],
    other: list[str],
    edited: str,
    bystander_before: dict[str, str],
    traffic: Traffic,
) -> None:
    after = memories(stack.tenant)
    # every seeded conversation in the new model's words; the old words gone, but the edit
    assert {f"New: {n}" for n in notes} <= set(after)
    assert [t for t in after if t.startswith("Old: note")] == []
    assert after["Edited by hand"] == edited
    assert "a raw turn to delete" not in after
    # each live add is in the new version: replayed by the new model, or written after the swap
    for note in traffic.added:
        assert f"New: {note}" in after or f"Old: {note}" in after, note
    # the other tenant is as it was
    assert memories(stack.bystander) == bystander_before
    assert {f"Old: {n}" for n in other} == set(bystander_before)


def test_a_tenant_is_extracted_again_by_a_new_model_while_memq_serves(
    stack: Stack, es: Elasticsearch
) -> None:
    notes = seed(stack.tenant)
    raw = finished(stack.tenant, add(stack.tenant, "a raw turn to delete", "u", "raw", False))
    other = seed(stack.bystander)
    before = memories(stack.tenant)
    assert sorted(before) == sorted([f"Old: {n}" for n in notes] + ["a raw turn to delete"])
    bystander_before = memories(stack.bystander)

    # by hand: one memory edited, the raw turn deleted
    edited = before[f"Old: {notes[0]}"]
    answer = stack.tenant.http.put(f"/v1/memories/{edited}", json={"text": "Edited by hand"})
    assert answer.status_code == 200, answer.text
    gone = raw["results"][0]["id"]
    assert stack.tenant.http.delete(f"/v1/memories/{gone}").status_code == 200

    dry = subprocess.run(
        ReprocessProcess(command_env(stack), stack.logs / "dry.log",
                         ["--reextract", "--tenant", stack.tenant.name, "--dry-run"]).command(),
        env=command_env(stack), capture_output=True, text=True, check=True,
    )  # fmt: skip
    jobs = SESSIONS * TURNS + 1
    assert f"{jobs} jobs of tenant {stack.tenant.name}" in dry.stderr, dry.stderr
    assert f"{SESSIONS * TURNS} LLM calls" in dry.stderr, dry.stderr
    assert stack.new.chat_requests() == []

    traffic = Traffic(stack.tenant)
    threads = [threading.Thread(target=traffic.adding), threading.Thread(target=traffic.searching)]
    for thread in threads:
        thread.start()
    time.sleep(1)
    command = ReprocessProcess(
        command_env(stack),
        stack.logs / "reextract.log",
        ["--reextract", "--tenant", stack.tenant.name, "--rate", "10"],
    )
    command.start()
    assert command.wait() == 0, command.tail()
    time.sleep(2)  # traffic goes on after the swap
    traffic.stop.set()
    for thread in threads:
        thread.join()

    # no add lost, no search failed
    ended = {note: finished(stack.tenant, url) for note, url in traffic.added.items()}
    lost = [note for note, job in ended.items() if job["status"] != JobStatus.SUCCEEDED]
    assert lost == [] and traffic.failed_searches == [], (lost, traffic.failed_searches[:3])
    assert len(traffic.added) > 5 and traffic.searches > 5

    check_new_version(stack, notes, other, edited, bystander_before, traffic)

    after = memories(stack.tenant)
    # the new model saw each job's earlier messages of its session, as the workers had
    prompts = [r["messages"][-1]["content"] for r in stack.new.chat_requests()]
    last = next(p for p in prompts if f"note: {notes[TURNS - 1]}" in p.split("New messages:")[-1])
    assert f"note: {notes[TURNS - 2]}" in last.split("New messages:")[0]

    # sources and history of a re-extracted memory
    memory_id = after[f"New: {notes[1]}"]
    got = stack.tenant.http.get(f"/v1/memories/{memory_id}", params={"include": "sources"})
    assert got.status_code == 200, got.text
    sources = got.json()["provenance"]["sources"]
    assert [s["content"] for s in sources] == [f"note: {notes[1]}"]
    history = stack.tenant.http.get(f"/v1/memories/{memory_id}/history").json()
    reprocess = [row for row in history if row["event"] == "REPROCESS"]
    assert len(reprocess) == 1 and "reextract with new-model" in reprocess[0]["new"], history

    # the version in use is the build, and says how it was made
    (index,) = es.indices.get_alias(name=stack.names.memories).body
    assert "-x" in index
    mapping = es.indices.get_mapping(index=index).body[index]["mappings"]["_meta"]
    assert mapping["reprocess"]["llm"]["model"] == "new-model"


def test_a_killed_reextraction_resumes_where_it_was(stack: Stack, es: Elasticsearch) -> None:
    notes = seed(stack.tenant)
    options = ["--reextract", "--rate", "2"]
    first = ReprocessProcess(command_env(stack), stack.logs / "first.log", options)
    first.start()
    wait_until(lambda: len(stack.new.chat_requests()) >= 6, "six jobs replayed", 60)
    first.kill()
    seen = len(stack.new.chat_requests())
    assert seen < len(notes)
    status = "/v1/admin/reprocess"  # the killed run's lock lapses within its TTL
    wait_until(lambda: stack.admin.get(status).json()["active"] is False, "the lock to lapse", 30)
    second = ReprocessProcess(command_env(stack), stack.logs / "second.log", ["--reextract"])
    second.start()
    assert second.wait() == 0, second.tail()
    # a batch in flight when it was killed is replayed again; nothing before it
    assert len(stack.new.chat_requests()) <= len(notes) + 16
    assert len(stack.new.chat_requests()) < seen + len(notes)
    after = memories(stack.tenant)
    assert sorted(after) == sorted(f"New: {n}" for n in notes)
    again = ReprocessProcess(command_env(stack), stack.logs / "again.log", ["--reextract"])
    again.start()
    assert again.wait() == 2
    assert "already re-extracted with these settings" in again.tail()


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--reembed", "--reextract"], "choose one mode"),
        (["--reembed", "--tenant", "t"], "--tenant goes with --reextract"),
        (["--reextract", "--tenant", "not a tenant!"], "is not a tenant id"),
    ],
)
def test_bad_reextract_options_are_refused(
    settings: Settings, capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    assert main(["reprocess", *argv]) == 2
    assert complaint in capsys.readouterr().err


def test_reextraction_without_an_llm_is_refused(
    settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMQ_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["reprocess", "--reextract"]) == 2
    assert "re-extraction needs an LLM" in capsys.readouterr().err


def test_a_job_the_new_model_cannot_extract_keeps_its_memories(
    stack: Stack, es: Elasticsearch
) -> None:
    urls = [add(stack.tenant, f"note: {n}", "u", "s") for n in ("kept one", "poison two")]
    for url in urls:
        assert finished(stack.tenant, url)["status"] == JobStatus.SUCCEEDED
    # a record whose request this release would not accept (no messages) is skipped, noted
    job = finished(stack.tenant, urls[0])
    record = es.get(index=stack.names.jobs, id=job["job_id"]).body["_source"]
    record |= {"job_id": "unreadable", "request": {**record["request"], "messages": []}}
    es.index(index=stack.names.jobs, id="unreadable", document=record, refresh=True)
    fine = model("New")
    stack.new.responder = lambda r: "no JSON here" if "poison" in str(r) else fine(r)
    command = ReprocessProcess(command_env(stack), stack.logs / "rx.log", ["--reextract"])
    command.start()
    assert command.wait() == 0, command.tail()
    assert "2 jobs carried over unreplayed" in command.tail()
    assert sorted(memories(stack.tenant)) == ["New: kept one", "Old: poison two"]


def test_a_reextraction_started_over_http_runs_on_a_worker(stack: Stack) -> None:
    notes = seed(stack.tenant)
    url = "/v1/admin/reprocess"
    body = {"mode": "reextract", "tenant": stack.tenant.name}
    dry = stack.admin.post(url, json=body | {"dry_run": True})
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert (plan["jobs"], plan["messages"], plan["llm_calls"]) == (len(notes),) * 3, plan
    bad = stack.admin.post(url, json=body | {"tenant": "not a tenant!"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "tenant", bad.text

    stack.old.responder = model("New")  # the workers' model answers differently now
    started = stack.admin.post(url, json=body)
    assert started.status_code == 202, started.text
    builds = started.json()["builds"]

    def switched() -> dict[str, Any] | None:
        response = stack.admin.get(url)
        assert response.status_code == 200, response.text
        status: dict[str, Any] = response.json()
        built = next((v for v in status["versions"] if v["index"] in builds), None)
        progress = (built or {}).get("progress") or {}  # None: the worker has not made it yet
        assert progress.get("stage") != "failed", progress
        return progress if progress.get("stage") == "switched" else None

    progress = wait_until(switched, "the re-extraction to switch", 120)
    assert progress["mode"] == "reextract" and progress["done"] == len(notes), progress
    assert sorted(memories(stack.tenant)) == sorted(f"New: {n}" for n in notes)
    again = stack.admin.post(url, json=body)
    assert again.status_code == 409 and "already re-extracted" in again.text, again.text


def test_a_user_erased_during_a_reextraction_is_not_in_the_new_version(
    stack: Stack, es: Elasticsearch
) -> None:
    gone = [finished(stack.tenant, add(stack.tenant, f"note: gone {i}", "gone", "g"))
            for i in range(2)]  # fmt: skip
    notes = seed(stack.tenant)
    assert all(job["status"] == JobStatus.SUCCEEDED for job in gone)
    command = ReprocessProcess(
        command_env(stack), stack.logs / "rx.log", ["--reextract", "--rate", "4"]
    )
    command.start()

    def replayed_gone() -> bool:
        return sum("note: gone" in str(r) for r in stack.new.chat_requests()) >= 2

    wait_until(replayed_gone, "the erased user's jobs to be replayed", 60)
    erased = stack.tenant.http.delete("/v1/users/gone")
    assert erased.status_code in {200, 202}, erased.text
    assert command.wait() == 0, command.tail()
    assert "an erased user's" in command.tail()
    assert memories(stack.tenant, "gone") == {}
    left = es.count(index=stack.names.memories, query={"term": {"user_id": "gone"}})["count"]
    assert left == 0
    rows = es.count(index=stack.names.history, query={"term": {"user_id": "gone"}})["count"]
    assert rows == 0
    assert sorted(memories(stack.tenant)) == sorted(f"New: {n}" for n in notes)
