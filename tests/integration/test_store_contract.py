"""The ``Store`` contract, one suite over both implementations: ``ElasticStore`` on the real
node and ``InMemoryStore``. Every protocol method is exercised, with the conflict cases of
persist (a rerun meets its own documents, an edited memory moves a fact to a job-derived id, a
lost race is a duplicate) and entity linking. The real embedder and lemmatizer make the vectors;
each test works in a fresh scope, so it sees only its own documents."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from elasticsearch import Elasticsearch

from pipeline.adapters.nlp.lemmatize import normalize_for_hash
from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import AddRequest, ContextMessage, MessageIn, Scope, md5_hex, memory_id
from pipeline.domain.state import JobState, Phase
from pipeline.domain.validity import Replacement
from pipeline.errors import PermanentError
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases import PHASES
from pipeline.memory import Memory
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames, drop_indices
from pipeline.store.memory import InMemoryStore
from pipeline.store.protocol import (
    EntityDoc,
    EntityLink,
    HistoryDoc,
    MemoryDoc,
    SessionMessages,
    StoredHash,
)
from pipeline.store.reads import KeyDocument, ListedKey
from tests.integration.test_routing import sharded_settings
from workers.runtime import Runtime

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def runtime(settings: Settings, indices: IndexNames) -> Runtime:
    return Runtime(settings)


@pytest.fixture(scope="module")
def sharded(settings: Settings, indices: IndexNames, es: Elasticsearch) -> Iterator[Runtime]:
    """The real store on indices of three shards: every call must pass its routing."""
    runtime = Runtime(sharded_settings(settings))
    yield runtime
    drop_indices(es, runtime.store.names)


@pytest.fixture(params=["elastic", "elastic-3-shards", "memory"])
def store(
    request: pytest.FixtureRequest, runtime: Runtime, sharded: Runtime
) -> Iterator[ElasticStore | InMemoryStore]:
    stores = {"elastic": lambda: runtime.store, "elastic-3-shards": lambda: sharded.store}
    yield stores.get(request.param, InMemoryStore)()


@pytest.fixture
def deps(runtime: Runtime, store: ElasticStore | InMemoryStore) -> Deps:
    return replace(runtime.deps, store=store, clock=lambda: NOW)


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="contract", user_id=f"u-{uuid.uuid4().hex[:10]}")


def visible(store: ElasticStore | InMemoryStore, es: Elasticsearch) -> None:
    """What was written is searchable (a no-op in memory; a refresh on the node)."""
    if isinstance(store, ElasticStore):
        es.indices.refresh(index=f"{store.names.prefix}-*")


def memory(deps: Deps, scope: Scope, text: str, job_id: str = "j1", **kw: object) -> MemoryDoc:
    text_hash = str(kw.pop("hash", md5_hex(normalize_for_hash(text))))
    return MemoryDoc(
        id=str(kw.pop("id", memory_id(scope, text_hash))),
        scope=scope,
        text=text,
        text_lemmatized=deps.lemmatizer.lemmatize(text),
        embedding=deps.embedder.embed([text])[0],
        hash=text_hash,
        job_id=job_id,
        created_at=NOW,
        observed_at=kw.pop("observed_at", NOW),
        **kw,  # type: ignore[arg-type]
    )


def history(doc: MemoryDoc, job_id: str = "j1") -> HistoryDoc:
    return HistoryDoc(
        id=f"h-{doc.id}-{job_id}",
        memory_id=doc.id,
        scope=doc.scope,
        event="ADD",
        job_id=job_id,
        created_at=NOW,
        new=doc.text,
    )


def entity(deps: Deps, scope: Scope, name: str) -> EntityDoc:
    return EntityDoc(
        id=f"e-{uuid.uuid4().hex}",
        scope=scope,
        text=name,
        normalized=name.lower(),
        type="name",
        embedding=deps.embedder.embed([name])[0],
        created_at=NOW,
    )


def record(job_id: str, status: JobStatus = JobStatus.SUCCEEDED) -> JobRecord:
    return JobRecord(
        job_id=job_id, tenant="contract", status=status, created_at=NOW, updated_at=NOW
    )


def verbatim(scope: Scope, *texts: str) -> AddRequest:
    messages = [MessageIn.model_validate({"role": "user", "content": t}) for t in texts]
    return AddRequest(scope=scope, messages=messages, infer=False)


# -- the session window ------------------------------------------------------------------------


def test_the_window_keeps_the_last_messages_oldest_first_per_scope(
    store: ElasticStore | InMemoryStore, scope: Scope
) -> None:
    other = scope.model_copy(update={"user_id": f"{scope.user_id}-other"})
    for i in range(12):
        message = ContextMessage(role="user", content=f"message {i}")
        store.append_messages(
            scope, f"job-{scope.user_id}-{i}", [message], NOW + timedelta(seconds=i)
        )
    assert [m.content for m in store.recent_messages(scope, 3)] == [
        "message 9",
        "message 10",
        "message 11",
    ]
    mine, theirs = store.recent_messages_many([scope, other], 10)
    assert len(mine) == 10 and mine[0].content == "message 2"
    assert theirs == []


def test_finishing_jobs_twice_appends_their_messages_once_and_saves_the_records(
    store: ElasticStore | InMemoryStore, scope: Scope
) -> None:
    job = f"finish-{uuid.uuid4().hex}"
    entry = SessionMessages(scope, job, [ContextMessage(role="user", content="hello")], NOW)
    store.finish_jobs([entry], [record(job)])
    store.finish_jobs([entry], [record(job)])  # a redelivered finalize
    assert [m.content for m in store.recent_messages(scope, 10)] == ["hello"]
    saved = store.get_job(job)
    assert saved is not None and saved.status == JobStatus.SUCCEEDED


def test_job_records_are_saved_replaced_and_read_back(
    store: ElasticStore | InMemoryStore,
) -> None:
    first, second = (f"job-{uuid.uuid4().hex}" for _ in range(2))
    store.save_job(record(first, JobStatus.RUNNING))
    store.save_jobs([record(first, JobStatus.FAILED), record(second)])
    got = store.get_job(first)
    assert got is not None and got.status == JobStatus.FAILED
    assert store.get_job(second) is not None
    assert store.get_job(f"missing-{uuid.uuid4().hex}") is None


# -- memories and history -----------------------------------------------------------------------


def test_creating_a_held_id_is_a_conflict_reporting_the_stored_hash_and_job(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope
) -> None:
    doc = memory(deps, scope, "Alice likes jazz", job_id="first")
    assert store.create_memories([doc]).created == [doc.id]
    again = store.create_memories([replace(doc, job_id="second")])
    assert again.created == [] and not again.failed
    assert again.conflicts == {doc.id: StoredHash(doc.hash, "first")}
    held = store.get_memory(doc.id)
    assert held is not None and held.text == "Alice likes jazz"
    assert "embedding" not in held.model_dump()
    assert store.get_memory(f"missing-{uuid.uuid4().hex}") is None


def test_memories_and_history_are_written_together_and_history_rows_deleted(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope
) -> None:
    doc = memory(deps, scope, "Alice lives in Oslo")
    memories, rows = store.create_memories_with_history([doc], [history(doc)])
    assert memories.created == [doc.id] and rows.created == [history(doc).id]
    assert store.write_history([history(doc)]).conflicts.keys() == {history(doc).id}
    store.delete_history([history(doc)])
    assert store.write_history([history(doc)]).created == [history(doc).id]


def test_similar_memories_rank_by_cosine_inside_the_scope(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope, es: Elasticsearch
) -> None:
    other = scope.model_copy(update={"user_id": f"{scope.user_id}-other"})
    texts = ["Alice plays the violin", "Alice owns a red bicycle", "Alice likes green tea"]
    store.create_memories([memory(deps, scope, t) for t in texts])
    store.create_memories([memory(deps, other, "Bob plays the violin")])
    visible(store, es)
    vector = deps.embedder.embed(["violin music"])[0]
    found = store.similar_memories(scope, vector, 2)
    assert [m.text for m in found][:1] == ["Alice plays the violin"] and len(found) == 2
    mine, theirs = store.similar_memories_many([(scope, vector), (other, vector)], 10)
    assert {m.text for m in mine} == set(texts)
    assert [m.text for m in theirs] == ["Bob plays the violin"]


def test_hashes_are_looked_up_in_the_whole_scope_and_only_there(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope, es: Elasticsearch
) -> None:
    other = scope.model_copy(update={"user_id": f"{scope.user_id}-other"})
    doc = memory(deps, scope, "Alice has a cat")
    store.create_memories([doc])
    visible(store, es)
    assert store.hashes_in_scope(scope, [doc.hash, "absent"]) == {doc.hash}
    assert store.hashes_in_scopes([(scope, [doc.hash]), (other, [doc.hash])]) == [{doc.hash}, set()]


# -- entities ----------------------------------------------------------------------------------


def test_links_are_recorded_on_both_sides_and_accumulate(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope, es: Elasticsearch
) -> None:
    first = memory(deps, scope, "Alice visited Lisbon")
    second = memory(deps, scope, "Alice loves Lisbon food")
    store.create_memories([first, second])
    lisbon = entity(deps, scope, "Lisbon")
    store.link_entities([EntityLink(lisbon, [first.id], lisbon.id)])
    store.link_entities([EntityLink(entity(deps, scope, "Lisbon"), [second.id], lisbon.id)])
    assert store.entity_links(scope, [lisbon.id]) == {lisbon.id: sorted([first.id, second.id])}
    held = store.get_memory(second.id)
    assert held is not None and held.entity_ids == [lisbon.id]
    visible(store, es)
    assert store.entities_by_name(scope, ["lisbon", "porto"]) == {"lisbon": lisbon.id}
    other = scope.model_copy(update={"user_id": f"{scope.user_id}-other"})
    assert store.entities_by_name(other, ["lisbon"]) == {}


def test_a_merge_target_that_is_gone_is_created_again_and_memories_can_be_left_alone(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope, es: Elasticsearch
) -> None:
    """Link chose to merge "Lisboa" into an entity that was deleted since; the memory was
    created naming that target (``update_memories=False``: it is left as written). Linking
    creates the target again under its id, so the memory's entity exists."""
    gone = entity(deps, scope, "Lisbon")
    doc = replace(memory(deps, scope, "Alice visited Lisboa"), entity_ids=(gone.id,))
    store.create_memories([doc])
    lisboa = entity(deps, scope, "Lisboa")
    store.link_entities([EntityLink(lisboa, [doc.id], gone.id)], update_memories=False)
    assert store.entity_links(scope, [gone.id, lisboa.id]) == {gone.id: [doc.id]}
    held = store.get_memory(doc.id)
    assert held is not None and held.entity_ids == [gone.id]


def test_the_nearest_entity_of_the_scope_and_its_cosine(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope, es: Elasticsearch
) -> None:
    vector = deps.embedder.embed(["Lisbon"])[0]
    assert store.nearest_entities(scope, [vector]) == [None]
    doc = memory(deps, scope, "Alice visited Lisbon")
    store.create_memories([doc])
    lisbon = entity(deps, scope, "Lisbon")
    store.link_entities([EntityLink(lisbon, [doc.id], lisbon.id)])
    visible(store, es)
    [(found, cosine)] = [n for n in store.nearest_entities(scope, [vector]) if n is not None]
    assert found == lisbon.id and cosine == pytest.approx(1.0, abs=0.02)
    other = scope.model_copy(update={"user_id": f"{scope.user_id}-other"})
    assert store.nearest_entities_many([(scope, vector), (other, vector)])[1] is None


# -- persist's conflict cases, through the phases ----------------------------------------------


def run_until(deps: Deps, state: JobState, phase: Phase) -> JobState:
    """Run the phases before ``phase`` (the worker died right before it)."""
    for spec in PHASES:
        if spec.phase is phase:
            return state
        state = spec.run(state, deps)
    raise AssertionError(f"no phase {phase}")


def persist(deps: Deps, state: JobState) -> JobState:
    return next(s for s in PHASES if s.phase is Phase.PERSIST).run(state, deps)


def test_persist_run_twice_reports_the_same_memories_and_writes_once(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope
) -> None:
    request = verbatim(scope, "I play chess on Sundays", "I grow tomatoes")
    state = run_until(
        deps, JobState(job_id=request.job_id(), request=request, received_at=NOW), Phase.PERSIST
    )
    first = persist(deps, state)
    again = persist(deps, state)  # the state was not saved before the crash: the phase reruns
    assert [m.id for m in again.stored] == [m.id for m in first.stored] and len(first.stored) == 2
    assert again.counts.get("duplicates", 0) == 0
    for stored in first.stored:
        held = store.get_memory(stored.id)
        assert held is not None and held.job_id == request.job_id()


def test_an_id_held_by_an_edited_memory_moves_the_fact_to_a_job_derived_id(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope
) -> None:
    text_hash = md5_hex(normalize_for_hash("I play chess on Sundays"))
    taken = memory_id(scope, text_hash)
    edited = memory(deps, scope, "I play chess on Saturdays now", id=taken, hash="edited")
    store.create_memories([edited])
    result = Memory(deps).add(verbatim(scope, "I play chess on Sundays"))
    [moved] = result["results"]
    assert moved["id"] != taken and moved["memory"] == "I play chess on Sundays"
    held = store.get_memory(taken)
    assert held is not None and held.text == "I play chess on Saturdays now"


def test_a_lost_race_on_one_fact_is_a_duplicate_not_a_second_memory(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope
) -> None:
    late, early = (f"{name}-{uuid.uuid4().hex}" for name in ("late", "early"))
    request = verbatim(scope, "I play chess on Sundays")
    state = run_until(deps, JobState(job_id=late, request=request, received_at=NOW), Phase.PERSIST)
    winner = Memory(deps).add(request, job_id=early)
    state = persist(deps, state)
    assert state.stored == [] and state.counts["duplicates"] == 1
    held = store.get_memory(winner["results"][0]["id"])
    assert held is not None and held.job_id == early


# -- validity: replacements (pipeline.domain.validity)
# ------------------------------------------------


def dated(deps: Deps, scope: Scope, text: str, year: int) -> MemoryDoc:
    return memory(deps, scope, text, observed_at=datetime(year, 6, 1, tzinfo=UTC))


def validity_of(store: ElasticStore | InMemoryStore, memory_id_: str) -> tuple[object, ...]:
    held = store.get_memory(memory_id_)
    assert held is not None
    return held.valid_until, held.replaced_by, held.replaces


def test_a_replacement_closes_the_older_memory_links_both_and_replays_to_nothing_new(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope
) -> None:
    lisbon = dated(deps, scope, "Maria lives in Lisbon", 2023)
    berlin = dated(deps, scope, "Maria lives in Berlin", 2024)
    store.create_memories([lisbon, berlin])
    [closure] = store.replace_memories([Replacement(berlin.id, lisbon.id, scope)])
    assert closure is not None and (closure.closed, closure.by) == (lisbon.id, berlin.id)
    assert closure.closed_text == lisbon.text and closure.at == berlin.observed_at
    until, replaced_by, _ = validity_of(store, lisbon.id)
    assert until == berlin.observed_at
    assert replaced_by == [berlin.id]
    assert validity_of(store, berlin.id) == (None, None, [lisbon.id])
    before = (validity_of(store, lisbon.id), validity_of(store, berlin.id))
    assert store.replace_memories([Replacement(berlin.id, lisbon.id, scope)]) == [closure]
    assert (validity_of(store, lisbon.id), validity_of(store, berlin.id)) == before


def test_a_backfilled_older_fact_is_closed_by_the_newer_memory_it_named(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope
) -> None:
    berlin = dated(deps, scope, "Maria lives in Berlin", 2024)
    porto = dated(deps, scope, "Maria lives in Porto", 2022)  # imported later, observed earlier
    store.create_memories([berlin, porto])
    [closure] = store.replace_memories([Replacement(porto.id, berlin.id, scope)])
    assert closure is not None and (closure.closed, closure.by) == (porto.id, berlin.id)
    assert validity_of(store, berlin.id) == (None, None, [porto.id])
    assert validity_of(store, porto.id)[1] == [berlin.id]


def test_concurrent_replacements_of_one_memory_all_land_with_the_earliest_end(
    store: ElasticStore | InMemoryStore, deps: Deps, scope: Scope
) -> None:
    old = dated(deps, scope, "Maria drives a Fiat", 2020)
    newer = [dated(deps, scope, f"Maria drives a car bought in {y}", y) for y in range(2021, 2027)]
    store.create_memories([old, *newer])
    gone = Replacement(newer[0].id, "no-such-memory", scope)
    with ThreadPoolExecutor(max_workers=len(newer)) as pool:
        done = list(
            pool.map(
                lambda doc: store.replace_memories([Replacement(doc.id, old.id, scope), gone]),
                newer,
            )
        )
    assert all(closure is not None and missing is None for closure, missing in done)
    until, replaced_by, _ = validity_of(store, old.id)
    assert sorted(replaced_by) == sorted(d.id for d in newer)  # type: ignore[arg-type]
    assert datetime.fromisoformat(str(until)) == newer[0].observed_at


def key_document(tenant: str, created_at: datetime, secret: str = "a" * 64) -> KeyDocument:
    return KeyDocument(
        tenant=tenant, name="contract", role="tenant", secret_sha256=secret, created_at=created_at
    )


def test_a_key_is_created_once_read_back_and_updated(store: ElasticStore | InMemoryStore) -> None:
    key_id, missing = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
    store.create_key(key_id, key_document("contract-keys", NOW))
    with pytest.raises(PermanentError):
        store.create_key(key_id, key_document("someone-else", NOW, secret="b" * 64))
    assert store.get_key(key_id) == key_document("contract-keys", NOW)
    assert store.get_key(missing) is None
    revoked = NOW + timedelta(hours=1)
    assert store.update_key(key_id, {"revoked_at": revoked.isoformat()}) is True
    held = store.get_key(key_id)
    assert held == key_document("contract-keys", NOW).model_copy(update={"revoked_at": revoked})
    assert store.update_key(missing, {"revoked_at": revoked.isoformat()}) is False
    assert store.get_key(missing) is None


def test_keys_are_listed_oldest_first_per_tenant_without_their_secret(
    store: ElasticStore | InMemoryStore,
) -> None:
    tenant, other = f"keys-{uuid.uuid4().hex[:8]}", f"keys-{uuid.uuid4().hex[:8]}"
    ids = [uuid.uuid4().hex[:16] for _ in range(3)]
    store.create_key(ids[1], key_document(tenant, NOW + timedelta(minutes=1)))
    store.create_key(ids[0], key_document(tenant, NOW))
    store.create_key(ids[2], key_document(other, NOW))
    listed = store.list_keys(tenant)
    assert [key.id for key in listed] == ids[:2]
    shown = key_document(tenant, NOW).model_dump(exclude={"secret_sha256"})
    assert listed[0] == ListedKey(id=ids[0], **shown)
    assert all(key.secret_sha256 is None for key in listed)
    assert {key.id for key in store.list_keys()} >= set(ids)


def test_the_store_reports_its_health(store: ElasticStore | InMemoryStore) -> None:
    health = store.health()
    assert health.cluster
    assert health.status in {"green", "yellow"}
    assert health.nodes >= 1
