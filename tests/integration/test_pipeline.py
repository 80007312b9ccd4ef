"""The ingestion chain end to end: a real worker process, real Elasticsearch and Redis, and the
scripted OpenAI-compatible server standing in for the model."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.domain.jobs import TERMINAL_STATUSES, JobRecord, JobStatus, job_record
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.domain.state import JobState, Phase
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames, Kind
from tests.fakellm import Delay, Fail, FakeLLMServer, Garbage
from tests.processes import WorkerProcess
from workers.app import MemqCelery
from workers.intake import replay, submit

pytestmark = pytest.mark.integration

TERMINAL = TERMINAL_STATUSES


def facts_from_conversation(request: dict[str, Any]) -> str:
    """The scripted model: one fact per line of the new messages that says 'fact: ...'."""
    user = request["messages"][-1]["content"]
    new = user.split("New messages:", 1)[-1]
    facts = re.findall(r"fact: ([^\n]+)", new)
    return json.dumps({"memory": [{"text": f, "attributed_to": "user"} for f in facts]})


@pytest.fixture(autouse=True)
def scripted(fake_llm: FakeLLMServer) -> Iterator[FakeLLMServer]:
    fake_llm.reset()
    fake_llm.responder = facts_from_conversation
    yield fake_llm
    fake_llm.reset()


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="it", user_id=f"user-{uuid.uuid4().hex[:8]}")


def ask(scope: Scope, *facts: str, **kw: Any) -> AddRequest:
    text = "\n".join(f"fact: {f}" for f in facts) or "just chatting"
    return AddRequest(scope=scope, messages=[MessageIn(role="user", content=text)], **kw)  # type: ignore[arg-type]


def wait_job(store: ElasticStore, job_id: str, timeout_s: float = 90) -> JobRecord:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = store.get_job(job_id)
        if record is not None and record.status in TERMINAL:
            return record
        time.sleep(0.2)
    raise AssertionError(
        f"job {job_id} did not finish within {timeout_s}s: {store.get_job(job_id)}"
    )


def in_line(app: MemqCelery, scope: Scope, fact: str, accepted: datetime | None = None) -> JobState:
    """A job accepted into its session's line (``accepted``: now) with its state saved, but
    no chain of its own."""
    at = accepted or datetime.now(UTC)
    state = JobState(job_id=uuid.uuid4().hex, request=ask(scope, fact), received_at=at)
    app.runtime.states.enter(state, at)
    return state


def memories_of(es: Elasticsearch, names: IndexNames, scope: Scope) -> list[dict[str, Any]]:
    es.indices.refresh(index=names.memories)
    hits = es.search(index=names.memories, query={"term": {"user_id": scope.user_id}}, size=1000)
    return [h["_source"] | {"_id": h["_id"]} for h in hits["hits"]["hits"]]


def test_a_conversation_becomes_memories_entities_history_and_a_job_record(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
    scripted: FakeLLMServer,
) -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    accepted = submit(
        celery_app,
        ask(
            scope,
            "Caroline joined an LGBTQ support group in Boston",
            "Caroline paints sunsets",
            timestamp=when,
        ),
    )
    assert accepted.created and accepted.record.status == JobStatus.QUEUED
    record = wait_job(store, accepted.record.job_id)
    assert record.status == JobStatus.SUCCEEDED, record.reason
    assert record.counts["stored"] == 2 and len(record.results) == 2
    assert set(record.timings_ms) >= {p.value for p in Phase if p is not Phase.FINALIZE}
    stored = memories_of(es, indices, scope)
    assert {m["text"] for m in stored} == {
        "Caroline joined an LGBTQ support group in Boston",
        "Caroline paints sunsets",
    }
    assert all(m["observed_at"].startswith("2023-05-08") for m in stored)
    es.indices.refresh(index=[indices.entities, indices.history, indices.messages])
    entities = es.search(
        index=indices.entities, query={"term": {"user_id": scope.user_id}}, size=50
    )
    names = {e["_source"]["text"] for e in entities["hits"]["hits"]}
    assert {"Caroline", "LGBTQ", "Boston"} <= names
    caroline = next(
        e["_source"] for e in entities["hits"]["hits"] if e["_source"]["text"] == "Caroline"
    )
    assert sorted(caroline["linked_memory_ids"]) == sorted(m["_id"] for m in stored)
    history = es.search(index=indices.history, query={"term": {"user_id": scope.user_id}})
    assert history["hits"]["total"]["value"] == 2
    window = es.search(
        index=indices.messages,
        query={
            "bool": {
                "filter": [{"term": {"session_key": scope.key}}, {"term": {"kind": "message"}}]
            }
        },
    )
    assert window["hits"]["total"]["value"] == 1
    system_prompt = scripted.chat_requests()[-1]["messages"][0]["content"]
    assert "2023-05-08" in system_prompt


def test_the_same_conversation_posted_twice_is_one_job_and_one_set(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
    scripted: FakeLLMServer,
) -> None:
    first = submit(celery_app, ask(scope, "Melanie runs marathons"))
    second = submit(celery_app, ask(scope, "Melanie runs marathons"))
    assert first.created and not second.created
    assert first.record.job_id == second.record.job_id
    wait_job(store, first.record.job_id)
    third = submit(celery_app, ask(scope, "Melanie runs marathons"))
    assert not third.created and third.record.status == JobStatus.SUCCEEDED
    assert len(memories_of(es, indices, scope)) == 1
    assert len(scripted.chat_requests()) == 1


def test_an_idempotency_key_names_the_job(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope
) -> None:
    first = submit(celery_app, ask(scope, "Jon owns a dance studio"), idempotency_key="req-1")
    second = submit(celery_app, ask(scope, "something else entirely"), idempotency_key="req-1")
    assert first.record.job_id == second.record.job_id and not second.created
    assert wait_job(store, first.record.job_id).results[0].text == "Jon owns a dance studio"


def test_garbage_from_the_model_fails_the_job_with_the_reply(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
    scripted: FakeLLMServer,
) -> None:
    scripted.responder = lambda _request: "Sure! Here are the facts: the user likes tea."
    record = wait_job(store, submit(celery_app, ask(scope, "tea")).record.job_id)
    assert record.status == JobStatus.FAILED and record.phase == "extract"
    assert "the user likes tea" in (record.reason or "")
    assert memories_of(es, indices, scope) == []


def test_a_model_timeout_is_retried_then_succeeds(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope, scripted: FakeLLMServer
) -> None:
    scripted.script_chat(Delay(3.0, then=Garbage()))  # longer than MEMQ_LLM_TIMEOUT_S=2
    record = wait_job(store, submit(celery_app, ask(scope, "Gina adopted a puppy")).record.job_id)
    assert record.status == JobStatus.SUCCEEDED, record.reason
    assert [r.text for r in record.results] == ["Gina adopted a puppy"]
    assert len(scripted.chat_requests()) == 2


def test_a_model_that_stays_down_makes_the_job_dead_then_replay_succeeds(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope, scripted: FakeLLMServer
) -> None:
    scripted.script_chat(*[Fail(503, "overloaded")] * 3)  # 1 call + MEMQ_LLM_MAX_RETRIES=2
    job_id = submit(celery_app, ask(scope, "Nate plays chess")).record.job_id
    record = wait_job(store, job_id)
    assert record.status == JobStatus.DEAD and "503" in (record.reason or "")
    assert len(scripted.chat_requests()) == 3  # retried at the call layer only, not again by Celery
    replayed = replay(celery_app, job_id)
    assert replayed.status == JobStatus.QUEUED and replayed.attempts == 1
    final = wait_job(store, job_id)
    assert final.status == JobStatus.SUCCEEDED and final.results[0].text == "Nate plays chess"


def test_jobs_of_one_session_run_in_order(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
) -> None:
    jobs = [submit(celery_app, ask(scope, f"step {i} of the plan")).record.job_id for i in range(4)]
    records = [wait_job(store, job) for job in jobs]
    finished = [r.finished_at for r in records]
    assert all(r.status == JobStatus.SUCCEEDED for r in records)
    assert finished == sorted(finished)  # type: ignore[type-var]
    window = celery_app.runtime.store.recent_messages(scope, 10)
    assert [m.content for m in window] == [f"fact: step {i} of the plan" for i in range(4)]
    states = celery_app.runtime.states
    left = [k for job in jobs for k in states.client.scan_iter(f"{states.prefix}:job:{job}:*")]
    assert left == []  # nothing of a finished job stays in Redis


def test_a_job_ending_starts_the_next_one_of_its_session(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope
) -> None:
    """The hand-on alone starts the job behind: this one was never given a chain of its own."""
    from workers.scheduler.turns import hand_on

    ahead, behind = in_line(celery_app, scope, "x"), in_line(celery_app, scope, "Ann rows")
    celery_app.runtime.states.delete(ahead.job_id)
    hand_on(celery_app.scheduler, [(scope.key, ahead.job_id)])
    record = wait_job(store, behind.job_id)
    assert record.status == JobStatus.SUCCEEDED and record.results[0].text == "Ann rows"


def test_a_lost_hand_on_only_delays_the_job_behind(
    celery_app: MemqCelery, store: ElasticStore, settings: Settings, scope: Scope
) -> None:
    """The job ahead ends without starting the next (its worker died in between): the reaper's
    walk of the lines finds the job behind at the head, never started, and makes it ready. It
    waits for nothing else: no task of its own polls the line."""
    states = celery_app.runtime.states
    ahead = in_line(celery_app, scope, "x")
    # behind it, accepted long enough ago to count as never started
    long_ago = datetime.now(UTC) - timedelta(seconds=settings.worker.orphan_after_s + 1)
    behind = in_line(celery_app, scope, "Bo sails", accepted=long_ago).job_id
    states.delete(ahead.job_id)
    assert states.leave_line(scope.key, ahead.job_id) == behind  # and no hand-on
    lost_at = time.monotonic()
    record = wait_job(store, behind, timeout_s=settings.worker.reaper_interval_s * 3 + 30)
    assert record.status == JobStatus.SUCCEEDED and record.results[0].text == "Bo sails"
    print(f"started by the reaper {time.monotonic() - lost_at:.1f} s after the lost hand-on")


def test_a_head_never_started_is_rescued_while_other_jobs_are_ready_but_not_twice(
    celery_app: MemqCelery,
    store: ElasticStore,
    settings: Settings,
    scope: Scope,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Other jobs waiting in the lane's ready list do not hold back a head that is not among
    them; a head that is among them is not made ready a second time."""
    from workers.scheduler.batches import LIVE
    from workers.scheduler.reaper import rescue_heads

    states = celery_app.runtime.states
    long_ago = datetime.now(UTC) - timedelta(seconds=settings.worker.orphan_after_s + 1)
    lost, queued = (
        JobState(job_id=uuid.uuid4().hex, request=ask(scope, "Cy knits"), received_at=long_ago),
        in_line(celery_app, Scope(user_id=f"other-{uuid.uuid4().hex[:8]}"), "Di hikes", long_ago),
    )
    states.enter(lost, long_ago)
    states.push_ready(LIVE, queued.job_id)  # a ready job the lane's next gather will take
    now = datetime.now(UTC).timestamp()
    with caplog.at_level("WARNING", logger="memq.worker"):
        rescue_heads(celery_app.scheduler, [(f"line-of-{queued.job_id}", queued.job_id)], now)
        assert not [r for r in caplog.records if "never started" in r.getMessage()]
        lost_head = [(f"line-of-{lost.job_id}", lost.job_id)]
        rescue_heads(celery_app.scheduler, lost_head, now)  # a gather
        rescued = [r for r in caplog.records if "never started" in r.getMessage()]
        assert [r.args for r in rescued] == [(lost.job_id,)]
    for job_id, text in ((lost.job_id, "Cy knits"), (queued.job_id, "Di hikes")):
        record = wait_job(store, job_id)
        assert record.status == JobStatus.SUCCEEDED and record.results[0].text == text


def test_an_intake_that_died_between_the_record_and_the_start_is_finished(
    celery_app: MemqCelery, store: ElasticStore, settings: Settings, scope: Scope
) -> None:
    """An intake's process died after writing the ``queued`` record, before the job had a
    state or a place in its line: the reaper finishes the intake from the record, and a submit
    of the same conversation meanwhile finishes it at once. Each runs once."""
    runtime = celery_app.runtime
    long_ago = datetime.now(UTC) - timedelta(seconds=settings.worker.orphan_after_s + 1)
    swept = ask(scope, "Flo paints")
    resubmitted = ask(Scope(user_id=f"again-{uuid.uuid4().hex[:8]}"), "Gus fishes")
    for request in (swept, resubmitted):
        state = JobState(job_id=request.job_id(), request=request, received_at=long_ago)
        runtime.states.intake_begun(state.job_id, long_ago)
        assert runtime.store.create_job(job_record(state, JobStatus.QUEUED, long_ago)) is None
        # and here the intake's process died
    again = submit(celery_app, resubmitted)
    assert not again.created and again.record.status == JobStatus.QUEUED
    started = time.monotonic()
    timeout_s = settings.worker.reaper_interval_s * 3 + 30
    for request, text in ((resubmitted, "Gus fishes"), (swept, "Flo paints")):
        record = wait_job(store, request.job_id(), timeout_s=timeout_s)
        assert record.status == JobStatus.SUCCEEDED, record
        assert [r.text for r in record.results] == [text] and record.attempts == 0
        print(f"{text!r} succeeded {time.monotonic() - started:.1f} s after the dead intake")
    unfinished = runtime.states.intakes_begun_before(datetime.now(UTC).timestamp(), 10_000)
    assert swept.job_id() not in unfinished and resubmitted.job_id() not in unfinished


def test_a_worker_killed_mid_job_loses_nothing_and_duplicates_nothing(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
    scripted: FakeLLMServer,
    worker: WorkerProcess,
) -> None:
    scripted.script_chat(Delay(1.5, then=Garbage()))  # the worker is killed while it waits
    job_id = submit(
        celery_app, ask(scope, "Audrey has three dogs", "Audrey lives in Ohio")
    ).record.job_id
    deadline = time.monotonic() + 30
    while not scripted.chat_requests() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert scripted.chat_requests(), "the job never reached the model"
    worker.kill()
    worker.start()
    worker.wait_ready(celery_app)
    record = wait_job(store, job_id, timeout_s=120)
    assert record.status == JobStatus.SUCCEEDED, record.reason
    texts = sorted(m["text"] for m in memories_of(es, indices, scope))
    assert texts == ["Audrey has three dogs", "Audrey lives in Ohio"]


def test_a_partly_rejected_bulk_reports_only_what_was_stored(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
) -> None:
    """Elasticsearch refuses one document of the bulk (a vector of zero magnitude, which
    cosine similarity cannot take; a vector of another size would be embedded again, as one
    made before a switch of embedder: ``pipeline.ingestion.phases.revector``): the persist phase
    reports the others as stored and that one as an error."""
    from pipeline.domain.models import Fact
    from pipeline.ingestion.phases.persist import persist_memories

    runtime = celery_app.runtime
    good = [0.1] * 384
    state = JobState(
        job_id=f"partial-{uuid.uuid4().hex[:6]}",
        request=ask(scope, "x"),
        received_at=datetime.now(UTC),
        facts=[Fact(text="kept one"), Fact(text="refused one"), Fact(text="kept two")],
        embeddings=[good, [0.0] * 384, good],
        lemmas=["keep one", "refuse one", "keep two"],
        hashes=["h1", "h2", "h3"],
        keep=[True, True, True],
    )
    result = persist_memories(state, runtime.deps)
    assert sorted(m.text for m in result.stored) == ["kept one", "kept two"]
    assert [(e.phase, e.text) for e in result.errors] == [(Phase.PERSIST, "refused one")]
    assert "HTTP 400" in result.errors[0].reason
    assert sorted(m["text"] for m in memories_of(es, indices, scope)) == ["kept one", "kept two"]


def test_ingestion_without_inference_needs_no_model(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
    scripted: FakeLLMServer,
) -> None:
    request = AddRequest(
        scope=scope,
        infer=False,
        metadata={"dia_id": "D1:3"},
        messages=[
            MessageIn(role="user", content="I went to the LGBTQ support group yesterday"),
            MessageIn(role="assistant", content="That sounds meaningful!"),
        ],
    )
    record = wait_job(store, submit(celery_app, request).record.job_id)
    assert record.status == JobStatus.SUCCEEDED and record.counts["stored"] == 2
    assert scripted.chat_requests() == []
    stored = memories_of(es, indices, scope)
    assert {m["metadata"]["dia_id"] for m in stored} == {"D1:3"}
    assert {m["attributed_to"] for m in stored} == {"user", "assistant"}


def test_a_failure_is_recorded_then_its_state_freed(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope
) -> None:
    from pipeline.errors import PermanentError
    from workers.failures import record_failure

    runtime = celery_app.runtime
    state = in_line(celery_app, scope, "x")
    record_failure(celery_app.endings, state.job_id, PermanentError("bad input"))
    record = store.get_job(state.job_id)
    assert record is not None and record.status == JobStatus.FAILED and record.reason == "bad input"
    assert not runtime.states.exists(state.job_id)


def test_a_failure_that_cannot_be_recorded_keeps_its_state_until_it_is(
    celery_app: MemqCelery, store: ElasticStore, settings: Settings, scope: Scope
) -> None:
    """Elasticsearch unreachable for the worker that ends a job: the state stays, and the
    record is written by a task of its own, retried (here by the test worker, which reaches
    Elasticsearch), before the state is freed."""
    from pipeline.errors import PermanentError
    from workers.app import create_celery
    from workers.failures import record_failure

    down = settings.model_copy(
        update={
            "es": settings.es.model_copy(
                update={"url": "http://127.0.0.1:9", "urls": ("http://127.0.0.1:9",)}
            )
        }
    )
    app = create_celery(down)
    runtime = app.runtime
    state = JobState(
        job_id=f"lost-{uuid.uuid4().hex[:8]}",
        request=ask(scope, "x"),
        received_at=datetime.now(UTC),
    )
    runtime.states.save(state)
    record_failure(app.endings, state.job_id, PermanentError("bad input"))
    record = wait_job(store, state.job_id, timeout_s=60)
    assert record.status == "failed" and record.reason == "bad input"
    # The record is written first and the state freed just after, by the same task: the test
    # may see the record in between, so it waits (briefly) for the state to go.
    deadline = time.monotonic() + 10
    while runtime.states.exists(state.job_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not runtime.states.exists(state.job_id), "the state outlived its recorded failure"


def test_a_job_failed_in_link_stored_nothing_and_is_replayed_whole(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
) -> None:
    """The entity index is closed (a real Elasticsearch refusal, not a double): link cannot
    search it, and the job fails there, before persist has written anything. Replayed once the
    index is open again, it stores its memories, each created with its entities."""
    entities = indices.concrete(Kind.ENTITIES)
    facts = ("Alice moved to Berlin", "Bob repairs Vespa scooters")
    es.indices.close(index=entities)
    try:
        job_id = submit(celery_app, ask(scope, *facts)).record.job_id
        failed = wait_job(store, job_id)
    finally:
        es.indices.open(index=entities, wait_for_active_shards="1")
    assert failed.status == JobStatus.FAILED and failed.phase == "link", failed.reason
    assert memories_of(es, indices, scope) == []  # nothing half-written

    replay(celery_app, job_id)
    record = wait_job(store, job_id)

    assert record.status == JobStatus.SUCCEEDED, record
    assert sorted(r.text for r in record.results) == sorted(facts)
    memories = memories_of(es, indices, scope)
    assert sorted(m["text"] for m in memories) == sorted(facts)
    assert all(m.get("entity_ids") for m in memories), memories


def test_entities_refused_after_the_memories_are_written_link_them_on_the_retry(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
) -> None:
    """A write block on the entity index (link's searches still run): persist writes the
    memories, then the entities' bulk is refused, and the phase is retried. Once the block is
    lifted, the retry meets its own memories (same ids): it counts them stored, links them on
    the entities, and writes no second copy."""
    entities = indices.concrete(Kind.ENTITIES)
    facts = ("Alice moved to Berlin", "Bob repairs Vespa scooters")
    es.indices.put_settings(index=entities, settings={"index.blocks.write": True})
    try:
        job_id = submit(celery_app, ask(scope, *facts)).record.job_id
        deadline = time.monotonic() + 60
        while len(memories_of(es, indices, scope)) < len(facts):
            assert time.monotonic() < deadline, "the memories were never written"
            time.sleep(0.2)
        time.sleep(2)  # a retry or two of persist meet the block
        held_back = store.get_job(job_id)
        assert held_back is not None and held_back.status not in TERMINAL, held_back
    finally:
        es.indices.put_settings(index=entities, settings={"index.blocks.write": False})
    record = wait_job(store, job_id)

    assert record.status == JobStatus.SUCCEEDED, record
    assert sorted(r.text for r in record.results) == sorted(facts)
    assert record.counts["stored"] == 2 and record.counts["duplicates"] == 0
    memories = memories_of(es, indices, scope)
    assert sorted(m["text"] for m in memories) == sorted(facts)  # no second copy
    linked = {e for m in memories for e in m["entity_ids"]}
    es.indices.refresh(index=entities)
    held = es.search(index=entities, query={"ids": {"values": sorted(linked)}}, size=50)
    assert {h["_id"] for h in held["hits"]["hits"]} == linked
    assert {i for h in held["hits"]["hits"] for i in h["_source"]["linked_memory_ids"]} == {
        m["_id"] for m in memories
    }
