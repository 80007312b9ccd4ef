"""Micro-batches against the real stack: jobs made ready together run as one batch, and a
poisoned conversation in a batched phase fails (or loses) only its own part while its
batch-mates go on."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from pipeline.adapters.embedding import make_embedder
from pipeline.config import Settings
from pipeline.domain.jobs import TERMINAL_STATUSES, JobRecord, JobStatus
from pipeline.domain.models import AddRequest, Fact, MessageIn, Scope
from pipeline.domain.state import JobState, Phase
from pipeline.errors import PermanentError
from pipeline.ingestion.batch import BatchRun
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases.embed import embed_facts_batch
from pipeline.ingestion.phases.link import link_entities_batch
from pipeline.ingestion.phases.persist import persist_memories_batch
from pipeline.ingestion.phases.retrieve import retrieve_existing_batch
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames
from tests.fakellm import Fail, FakeLLMServer, Normal, fake_embedding
from tests.integration.test_pipeline import facts_from_conversation
from workers.app import MemqCelery
from workers.names import GATHER_TASK
from workers.scheduler.batches import BACKFILL, LIVE

pytestmark = pytest.mark.integration

TERMINAL = TERMINAL_STATUSES
GOOD = [0.1] * 384
NOW = datetime.now(UTC)


def fake_embedding_of(text: str) -> list[float]:
    """What the scripted embeddings server answers for ``text`` (so a search finds it)."""
    return fake_embedding(text, 384)


def es_refresh(app: MemqCelery, indices: IndexNames) -> None:
    app.runtime.es.indices.refresh(index=indices.memories)


def poisoned_or_facts(request: dict[str, Any]) -> str:
    """The scripted model: prose (unparsable) for a conversation saying 'poison', else one
    fact per 'fact: ...' line of the new messages."""
    new = request["messages"][-1]["content"].split("New messages:", 1)[-1]
    if "poison" in new:
        return "Sorry, I would rather chat about the weather."
    return facts_from_conversation(request)


@pytest.fixture(autouse=True)
def scripted(fake_llm: FakeLLMServer) -> Iterator[FakeLLMServer]:
    fake_llm.reset()
    fake_llm.responder = poisoned_or_facts
    yield fake_llm
    fake_llm.reset()


def scope() -> Scope:
    return Scope(tenant="it", user_id=f"user-{uuid.uuid4().hex[:8]}")


def ask(in_scope: Scope, *facts: str) -> AddRequest:
    text = "\n".join(f"fact: {f}" for f in facts)
    return AddRequest(scope=in_scope, messages=[MessageIn(role="user", content=text)])


def ready(app: MemqCelery, request: AddRequest, lane: str = LIVE) -> str:
    """A job accepted and made ready, with no gather sent yet: the next gather takes it."""
    now = datetime.now(UTC)
    state = JobState(job_id=uuid.uuid4().hex, request=request, received_at=now)
    app.runtime.states.enter(state, now)
    app.runtime.states.push_ready(lane, state.job_id)
    return state.job_id


def wait_job(store: ElasticStore, job_id: str, timeout_s: float = 90) -> JobRecord:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = store.get_job(job_id)
        if record is not None and record.status in TERMINAL:
            return record
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish: {store.get_job(job_id)}")


def texts_of(es: Elasticsearch, index: str, field: str, value: str) -> list[str]:
    es.indices.refresh(index=index)
    hits = es.search(index=index, query={"term": {field: value}}, size=100)["hits"]["hits"]
    return sorted(h["_source"].get("text") or h["_source"].get("new") for h in hits)


def state_with_facts(in_scope: Scope, texts: list[str], vectors: list[list[float]]) -> JobState:
    return JobState(
        job_id=f"batch-{uuid.uuid4().hex[:8]}",
        request=ask(in_scope, "x"),
        received_at=datetime.now(UTC),
        facts=[Fact(text=t) for t in texts],
        embeddings=vectors,  # type: ignore[arg-type]
        lemmas=[t.lower() for t in texts],
        hashes=[uuid.uuid4().hex for _ in texts],
        keep=[True] * len(texts),
    )


def test_a_garbage_reply_fails_only_its_own_conversation_in_a_batch(
    celery_app: MemqCelery,
    store: ElasticStore,
    settings: Settings,
    es: Elasticsearch,
    indices: IndexNames,
    scripted: FakeLLMServer,
) -> None:
    scopes = [scope() for _ in range(3)]
    jobs = [
        ready(celery_app, ask(scopes[0], "Ann keeps bees")),
        ready(celery_app, ask(scopes[1], "poison")),
        ready(celery_app, ask(scopes[2], "Bo builds boats")),
    ]
    celery_app.send_task(GATHER_TASK, args=(LIVE,), queue=settings.queues.io)
    first, poisoned, last = (wait_job(store, job) for job in jobs)
    assert poisoned.status == JobStatus.FAILED and poisoned.phase == "extract"
    assert "weather" in (poisoned.reason or "")
    assert first.status == last.status == JobStatus.SUCCEEDED
    assert first.counts["batch_size"] == last.counts["batch_size"] == 3
    assert [r.text for r in first.results] == ["Ann keeps bees"]
    assert [r.text for r in last.results] == ["Bo builds boats"]
    assert len(scripted.chat_requests()) == 3  # one call each; the unparsable one not retried
    assert texts_of(es, indices.memories, "user_id", scopes[1].user_id or "") == []


def test_one_job_per_session_in_a_batch_and_the_next_follows(
    celery_app: MemqCelery, store: ElasticStore, settings: Settings
) -> None:
    """Two ready jobs of one session never share a batch: the second waits for the first."""
    shared = scope()
    ahead = ready(celery_app, ask(shared, "Cy plays oboe"))
    behind = ready(celery_app, ask(shared, "Cy plays bassoon too"))
    other = ready(celery_app, ask(scope(), "Di runs"))
    celery_app.send_task(GATHER_TASK, args=(LIVE,), queue=settings.queues.io)
    records = [wait_job(store, job) for job in (ahead, behind, other)]
    assert [r.status for r in records] == [JobStatus.SUCCEEDED] * 3
    assert records[0].counts["batch_size"] == records[2].counts["batch_size"] == 2
    assert records[1].counts["batch_size"] == 1
    assert records[0].finished_at <= records[1].finished_at  # type: ignore[operator]
    window = celery_app.runtime.store.recent_messages(shared, 10)
    assert [m.content for m in window] == ["fact: Cy plays oboe", "fact: Cy plays bassoon too"]


@pytest.mark.parametrize(("lane", "sizes"), [(BACKFILL, [10] * 20), (LIVE, [20] * 20)])
def test_backfill_jobs_are_spread_evenly_over_the_batch_slots_and_live_ones_are_not(
    celery_app: MemqCelery, store: ElasticStore, settings: Settings, lane: str, sizes: list[int]
) -> None:
    """20 sessions ready at once, two batch slots (the default). A backfill runs them as two
    batches of 10, from one gather (it sends a second for what it left); the live lane takes
    them all in one batch, as measured best with a remote embedder (docs/BENCHMARKS.md)."""
    assert settings.worker.batches_in_flight == 2
    jobs = [ready(celery_app, ask(scope(), f"Ed keeps {i} hens"), lane) for i in range(20)]
    celery_app.send_task(GATHER_TASK, args=(lane,), queue=settings.queues.io)
    records = [wait_job(store, job) for job in jobs]
    assert [r.status for r in records] == [JobStatus.SUCCEEDED] * 20
    assert sorted(r.counts["batch_size"] for r in records) == sizes
    assert [r.results[0].text for r in records] == [f"Ed keeps {i} hens" for i in range(20)]


def test_a_ready_job_whose_gather_was_lost_is_gathered_by_the_reaper(
    celery_app: MemqCelery, store: ElasticStore, settings: Settings
) -> None:
    """A job made ready whose gather never came (lost with its worker): the reaper's sweep
    sends its lane one."""
    job = ready(celery_app, ask(scope(), "Ed sings"))  # and no gather sent
    started = time.monotonic()
    record = wait_job(store, job, timeout_s=settings.worker.reaper_interval_s * 3 + 30)
    assert record.status == JobStatus.SUCCEEDED and record.results[0].text == "Ed sings"
    print(f"gathered and run {time.monotonic() - started:.1f} s after it was made ready")


def test_a_failing_batch_embedding_falls_back_to_items_and_loses_only_the_refused_one(
    settings: Settings, celery_app: MemqCelery, fake_llm: FakeLLMServer, indices: IndexNames
) -> None:
    """The OpenAI-compatible embeddings client against the scripted server: the batch call
    fails, then each fact is embedded alone and only the refused one is missing."""
    embedder_config = settings.embedder.model_copy(
        update={"kind": "openai", "base_url": fake_llm.base_url}
    )
    remote = settings.model_copy(update={"embedder": embedder_config})
    deps = Deps(
        store=celery_app.runtime.store,
        embedder=make_embedder(remote),
        lemmatizer=celery_app.runtime.deps.lemmatizer,
        entities=celery_app.runtime.deps.entities,
        llm=None,
    )
    one = state_with_facts(scope(), ["Eve sings", "Eve swims"], [])
    two = state_with_facts(scope(), ["Fay knits"], [])
    fake_llm.script_embeddings(Fail(503), Normal(), Fail(400, "refused"), Normal())
    result = embed_facts_batch([one, two], deps)
    assert result.failures == {}
    first, second = result.states
    assert first.embeddings[0] is not None and first.embeddings[1] is None
    assert [(e.phase, e.text) for e in first.errors] == [(Phase.EMBED, "Eve swims")]
    assert second.embeddings[0] is not None and second.errors == []
    embed_calls = [r for path, r in fake_llm.requests if path.endswith("/embeddings")]
    assert [len(r["input"]) for r in embed_calls] == [3, 1, 1, 1]


def remote_embedder_deps(settings: Settings, app: MemqCelery, fake_llm: FakeLLMServer) -> Deps:
    """The workers' deps with the embeddings of the scripted server (which can refuse them)."""
    embedder_config = settings.embedder.model_copy(
        update={"kind": "openai", "base_url": fake_llm.base_url}
    )
    remote = settings.model_copy(update={"embedder": embedder_config})
    return Deps(
        store=app.runtime.store,
        embedder=make_embedder(remote),
        lemmatizer=app.runtime.deps.lemmatizer,
        entities=app.runtime.deps.entities,
        llm=None,
    )


def alone_refused(
    run: BatchRun, good: JobState, bad: JobState, deps: Deps, fake_llm: FakeLLMServer
) -> JobState:
    """Run a phase over ``good`` and ``bad`` while the embeddings server refuses the batch's
    call, then ``bad``'s alone: only ``bad`` fails, with the server's reason. ``good``'s new
    state."""
    fake_llm.script_embeddings(Fail(503), Normal(), Fail(400, "input refused"))
    result = run([good, bad], deps)
    assert list(result.failures) == [bad.job_id]
    assert "input refused" in str(result.failures[bad.job_id])
    [went_on] = result.states
    assert went_on.job_id == good.job_id
    return went_on


def test_a_retrieval_embedding_refused_for_one_job_fails_only_that_job(
    settings: Settings, celery_app: MemqCelery, fake_llm: FakeLLMServer, indices: IndexNames
) -> None:
    """Retrieval embeds the new turns of the whole batch in one call; the embeddings server
    refuses that call, then refuses one job's text alone: that job fails with the reason, the
    other one gets its existing memories from the real node."""
    runtime = celery_app.runtime
    deps = remote_embedder_deps(settings, celery_app, fake_llm)
    kept_scope = scope()
    held = state_with_facts(kept_scope, ["Kim keeps bees"], [fake_embedding_of("fact: Kim")])
    persist_memories_batch([held], runtime.deps)
    es_refresh(celery_app, indices)

    def job(in_scope: Scope, text: str) -> JobState:
        return JobState(job_id=uuid.uuid4().hex, request=ask(in_scope, text), received_at=NOW)

    good, bad = job(kept_scope, "Kim"), job(scope(), "Lou")
    retrieved = alone_refused(retrieve_existing_batch, good, bad, deps, fake_llm)
    assert [m.text for m in retrieved.existing] == ["Kim keeps bees"]
    embed_calls = [r for path, r in fake_llm.requests if path.endswith("/embeddings")]
    assert [len(r["input"]) for r in embed_calls] == [2, 1, 1]


def test_a_partly_refused_bulk_of_a_batch_is_read_item_by_item(
    celery_app: MemqCelery, es: Elasticsearch, indices: IndexNames
) -> None:
    """One bulk for two jobs' memories and history; Elasticsearch refuses one memory (a vector
    of zero magnitude, which cosine similarity cannot take): the rest is stored, and no history
    row speaks of the refused one."""
    runtime = celery_app.runtime
    first_scope, second_scope = scope(), scope()
    first = state_with_facts(first_scope, ["Gus paints", "Gus sculpts"], [GOOD, [0.0] * len(GOOD)])
    second = state_with_facts(second_scope, ["Hal rows"], [GOOD])
    result = persist_memories_batch([first, second], runtime.deps)
    assert result.failures == {}
    one, two = result.states
    assert [m.text for m in one.stored] == ["Gus paints"]
    assert [(e.phase, e.text) for e in one.errors] == [(Phase.PERSIST, "Gus sculpts")]
    assert [m.text for m in two.stored] == ["Hal rows"] and two.errors == []
    assert texts_of(es, indices.memories, "user_id", first_scope.user_id or "") == ["Gus paints"]
    assert texts_of(es, indices.history, "user_id", first_scope.user_id or "") == ["Gus paints"]
    assert texts_of(es, indices.history, "user_id", second_scope.user_id or "") == ["Hal rows"]


def test_an_entity_embedding_refused_for_one_job_fails_only_that_job_in_link(
    settings: Settings, celery_app: MemqCelery, fake_llm: FakeLLMServer
) -> None:
    """Link embeds the entities of the whole batch in one call; the embeddings server refuses
    it, then refuses one job's entities alone: that job fails with the reason, the other one
    gets its entities and their targets."""
    deps = remote_embedder_deps(settings, celery_app, fake_llm)
    good = state_with_facts(scope(), ["Ida visited Paris"], [GOOD])
    bad = state_with_facts(scope(), ["Jo visited Rome"], [GOOD])
    planned = alone_refused(link_entities_batch, good, bad, deps, fake_llm)
    assert {e.text for e in planned.entities} >= {"Ida", "Paris"}
    assert all(e.facts == [0] for e in planned.entities)
    assert len(planned.entity_vectors) == len(planned.entities)


def test_an_entity_refused_in_persist_fails_only_its_job(
    celery_app: MemqCelery, es: Elasticsearch, indices: IndexNames
) -> None:
    """Persist writes the batch's memories, then links them on the entities in one bulk; one
    job's entity is refused (a vector of zero magnitude): the phase runs again job by job, the
    other job's memories are stored and linked, and only that job fails, for good, with
    Elasticsearch's reason."""
    runtime = celery_app.runtime
    good_scope, bad_scope = scope(), scope()
    good = state_with_facts(good_scope, ["Ida visited Paris"], [GOOD])
    bad = state_with_facts(bad_scope, ["Jo visited Rome"], [GOOD])
    good = link_entities_batch([good], runtime.deps).states[0]
    bad = link_entities_batch([bad], runtime.deps).states[0]
    bad = bad.with_(entity_vectors=[[0.0] * len(GOOD) for _ in bad.entities])
    result = persist_memories_batch([good, bad], runtime.deps)
    assert list(result.failures) == [bad.job_id]
    refused = result.failures[bad.job_id]
    assert isinstance(refused, PermanentError), refused  # fails now, not at the retry deadline
    assert "link entities: HTTP 400" in str(refused) and "magnitude" in str(refused), refused
    [stored] = result.states
    assert stored.job_id == good.job_id and stored.counts["entities"] >= 2  # Ida, Paris
    es.indices.refresh(index=[indices.entities, indices.memories])
    linked = es.search(
        index=indices.entities, query={"term": {"user_id": good_scope.user_id}}, size=10
    )["hits"]["hits"]
    assert {h["_source"]["text"] for h in linked} >= {"Ida", "Paris"}
    [memory] = es.search(
        index=indices.memories, query={"term": {"user_id": good_scope.user_id}}, size=10
    )["hits"]["hits"]
    assert sorted(memory["_source"]["entity_ids"]) == sorted(h["_id"] for h in linked)
    assert all(h["_source"]["linked_memory_ids"] == [memory["_id"]] for h in linked)
