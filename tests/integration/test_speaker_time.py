"""Who said a memory and when it happened are searchable: through a real worker and the real
node, with the real local embedder."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from pipeline.domain.jobs import JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Role, Scope
from pipeline.serving.search import Searcher, SearchQuery
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames
from pipeline.store.protocol import MemoryDoc
from tests.fakellm import FakeLLMServer
from tests.integration.test_pipeline import memories_of, wait_job
from workers.app import MemqCelery
from workers.intake import submit

pytestmark = pytest.mark.integration


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="speaker", user_id=f"chat-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def searcher(celery_app: MemqCelery) -> Searcher:
    return celery_app.runtime.searcher


@pytest.fixture
def scripted(fake_llm: FakeLLMServer) -> Iterator[FakeLLMServer]:
    fake_llm.reset()
    yield fake_llm
    fake_llm.reset()


def said(name: str, text: str) -> MessageIn:
    return MessageIn(role=Role.USER, content=text, name=name)


def ingest(app: MemqCelery, store: ElasticStore, request: AddRequest) -> None:
    record = wait_job(store, submit(app, request).record.job_id)
    assert record.status == JobStatus.SUCCEEDED, record.reason


def test_the_speaker_finds_first_person_turns_and_the_text_stays_as_said(
    celery_app: MemqCelery,
    store: ElasticStore,
    searcher: Searcher,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
) -> None:
    messages = [
        said("Maria", "I adopted a dog from the shelter last month."),
        said("Jon", "I adopted a cat from the shelter last month."),
        said("Jon", "Work has been busy lately."),
    ]
    ingest(celery_app, store, AddRequest(scope=scope, messages=messages, infer=False))
    stored = {m["text"]: m for m in memories_of(es, indices, scope)}
    assert stored["I adopted a dog from the shelter last month."]["speaker"] == "Maria"
    assert stored["Work has been busy lately."]["speaker"] == "Jon"

    for name, pet in (("Maria", "dog"), ("Jon", "cat")):
        hits = searcher.search(SearchQuery(query=f"What did {name} adopt?", scope=scope, top_k=3))
        assert hits[0].memory == f"I adopted a {pet} from the shelter last month."
        assert hits[0].actor_id == name

    hits = searcher.search(SearchQuery(query="What is Jon's job like?", scope=scope, top_k=1))
    assert hits[0].memory == "Work has been busy lately."


def test_the_speaker_is_an_entity_of_what_they_said(
    celery_app: MemqCelery, store: ElasticStore, es: Elasticsearch, scope: Scope
) -> None:
    messages = [said("Maria_Lopez", "I started learning the violin.")]
    ingest(celery_app, store, AddRequest(scope=scope, messages=messages, infer=False))
    es.indices.refresh(index=store.names.entities)  # entities are found by a search
    found = store.entities_by_name(scope, ["maria lopez"])
    links = store.entity_links(scope, list(found.values()))
    (linked,) = links.values()
    assert len(linked) == 1


def test_infer_true_extraction_is_asked_to_name_the_people_who_speak(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope, scripted: FakeLLMServer
) -> None:
    scripted.responder = lambda request: json.dumps(
        {"memory": [{"text": "Maria adopted a dog", "attributed_to": "user"}]}
    )
    messages = [said("Maria", "I adopted a dog!")]
    ingest(celery_app, store, AddRequest(scope=scope, messages=messages))
    (body,) = [b for b in scripted.chat_requests() if "I adopted a dog!" in json.dumps(b)]
    system, user = (m["content"] for m in body["messages"])
    assert "user (Maria): I adopted a dog!" in user
    assert "under their name" in system and 'never "The user ..." for a named person' in system


# -- time -------------------------------------------------------------------------------------


def put_at(celery_app: MemqCelery, scope: Scope, dated: dict[str, datetime]) -> None:
    """Memories observed at the given times, written as ingestion writes them."""
    deps = celery_app.runtime.deps
    texts = list(dated)
    docs = [
        MemoryDoc(
            id=uuid.uuid4().hex,
            scope=scope,
            text=text,
            text_lemmatized=deps.lemmatizer.lemmatize(text),
            embedding=vector,
            hash=uuid.uuid4().hex,
            job_id="test",
            created_at=dated[text],
            observed_at=dated[text],
        )
        for text, vector in zip(texts, deps.embedder.embed(texts), strict=True)
    ]
    store = celery_app.runtime.store
    assert not store.create_memories(docs).failed
    celery_app.runtime.es.indices.refresh(index=store.names.memories)


def top(searcher: Searcher, scope: Scope, query: str, **options: Any) -> str:
    return searcher.search(SearchQuery(query=query, scope=scope, top_k=3, **options))[0].memory


def test_a_period_in_the_query_favours_memories_observed_in_it(
    celery_app: MemqCelery, searcher: Searcher, scope: Scope
) -> None:
    put_at(
        celery_app,
        scope,
        {
            "Went hiking with my sister.": datetime(2023, 5, 14, tzinfo=UTC),
            "Went hiking with my brother.": datetime(2023, 9, 2, tzinfo=UTC),
        },
    )
    assert top(searcher, scope, "Who did I go hiking with in May 2023?") == (
        "Went hiking with my sister."
    )
    later = datetime(2023, 12, 1, tzinfo=UTC)
    september = top(searcher, scope, "Who did I go hiking with in September?", reference_time=later)
    assert september == "Went hiking with my brother."


def test_relative_times_are_read_against_the_reference_time(
    celery_app: MemqCelery, searcher: Searcher, scope: Scope
) -> None:
    now = datetime(2024, 3, 20, 12, tzinfo=UTC)  # a Wednesday
    put_at(
        celery_app,
        scope,
        {
            "Had dinner at the Thai place.": now - timedelta(days=8),
            "Had dinner at the Greek place.": now - timedelta(days=60),
        },
    )
    hits = searcher.search(
        SearchQuery(
            query="Where did I have dinner last week?",
            scope=scope,
            top_k=2,
            reference_time=now,
            explain=True,
        )
    )
    assert hits[0].memory == "Had dinner at the Thai place."
    assert hits[0].explain is not None and hits[0].explain.time == 1.0
    assert hits[1].explain is not None and hits[1].explain.time is not None
    assert hits[1].explain.time < 0.1


def test_a_when_question_favours_the_memory_that_carries_a_time(
    celery_app: MemqCelery, searcher: Searcher, scope: Scope
) -> None:
    now = datetime(2023, 7, 3, tzinfo=UTC)
    put_at(
        celery_app,
        scope,
        {
            "The pottery class was so relaxing.": now,
            "I signed up for a pottery class yesterday.": now,
        },
    )
    hits = searcher.search(
        SearchQuery(query="When did she sign up for pottery?", scope=scope, explain=True)
    )
    assert hits[0].memory == "I signed up for a pottery class yesterday."
    assert hits[0].explain is not None and hits[0].explain.dated == 1.0
    off = replace(searcher, config=searcher.config.model_copy(update={"weight_dated": 0.0}))
    plain = off.search(SearchQuery(query="When did she sign up for pottery?", scope=scope))
    assert {h.memory for h in plain} == {h.memory for h in hits}  # a signal, never a filter
