"""The reply to the best hit follows it: through a real worker and the real node, with the
real local embedder. A question matches the turn that asked it; the answer is the next turn,
which shares no word with the question."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from pipeline.domain.models import AddRequest, Scope
from pipeline.serving.search import Searcher, SearchHit, SearchQuery
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames
from tests.fakellm import FakeLLMServer
from tests.integration.test_pipeline import memories_of
from tests.integration.test_speaker_time import ingest as ingest_job
from tests.integration.test_speaker_time import said
from workers.app import MemqCelery

pytestmark = pytest.mark.integration

ASKED = "Lovely picture! How long have you two been married?"
ANSWER = "Five years already! Time flies, it feels like yesterday."
QUESTION = "How long have they been married?"  # names nobody: no hop


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="replies", user_id=f"chat-{uuid.uuid4().hex[:8]}")


def ingest(app: MemqCelery, store: ElasticStore, request: AddRequest) -> None:
    """The speaker tests' ingestion (submit, wait for success), then visible to search."""
    ingest_job(app, store, request)
    store.make_visible()


def chat(app: MemqCelery, store: ElasticStore, scope: Scope) -> None:
    messages = [
        said("Mel", "Here is a photo from our anniversary dinner."),
        said("Caroline", ASKED),
        said("Mel", ANSWER),
        said("Caroline", "My cousin got married last spring."),
        said("Mel", "The neighbours are a lovely couple, together forever."),
        said("Caroline", "How long did the drive to the wedding take you?"),
        said("Mel", "Hiking sounds wonderful, where did you go?"),
    ]
    ingest(app, store, AddRequest(scope=scope, messages=messages, infer=False))


def search(searcher: Searcher, scope: Scope, **options: Any) -> list[SearchHit]:
    return searcher.search(
        SearchQuery(query=QUESTION, scope=scope, top_k=3, explain=True, **options)
    )


def test_verbatim_memories_keep_their_turn_in_the_job(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
) -> None:
    chat(celery_app, store, scope)
    turns = {m["text"]: m["turn"] for m in memories_of(es, indices, scope)}
    assert turns[ASKED] == 1 and turns[ANSWER] == 2
    assert sorted(turns.values()) == list(range(7))


def test_the_answer_follows_the_question_it_answers(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope
) -> None:
    chat(celery_app, store, scope)
    searcher = celery_app.runtime.searcher
    without = search(searcher, scope, reply=False)
    assert without[0].memory == ASKED  # the question's words find the turn that asked it
    assert without[1].memory != ANSWER  # and alone they rank the answer lower

    hits = search(searcher, scope)
    assert [h.memory for h in hits[:2]] == [ASKED, ANSWER]
    assert hits[1].explain is not None and hits[1].explain.reply_to == hits[0].id
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(hits) == 3  # top_k still holds


def test_the_reply_stays_inside_the_filters(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope
) -> None:
    chat(celery_app, store, scope)
    hits = search(celery_app.runtime.searcher, scope, filters={"actor_id": "Caroline"})
    assert hits[0].memory == ASKED
    assert all(h.actor_id == "Caroline" for h in hits)  # Mel's answer is filtered out


def test_the_setting_turns_it_off(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope
) -> None:
    chat(celery_app, store, scope)
    searcher = celery_app.runtime.searcher
    off = searcher.__class__(
        **{**searcher.__dict__, "config": searcher.config.model_copy(update={"reply": False})}
    )
    assert [h.memory for h in search(off, scope)] == [
        h.memory for h in search(searcher, scope, reply=False)
    ]


class Overlap:
    """A reranker: the share of the query's words each text has."""

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        wanted = set(query.lower().strip("?").split())
        return [len(wanted & set(t.lower().strip("?!.").split())) / len(wanted) for t in texts]


def test_the_reply_follows_the_best_hit_a_reranker_chose(
    celery_app: MemqCelery, store: ElasticStore, scope: Scope
) -> None:
    chat(celery_app, store, scope)
    reranked = replace(celery_app.runtime.searcher, reranker=Overlap())
    hits = search(reranked, scope, rerank=True)  # its reply is read after the reranker chose
    assert [h.memory for h in hits[:2]] == [ASKED, ANSWER]
    assert hits[1].explain is not None and hits[1].explain.reply_to == hits[0].id


def test_extracted_facts_have_no_turn_and_no_reply(
    celery_app: MemqCelery,
    store: ElasticStore,
    es: Elasticsearch,
    indices: IndexNames,
    scope: Scope,
    fake_llm: FakeLLMServer,
) -> None:
    fake_llm.reset()
    fake_llm.responder = lambda request: json.dumps(
        {
            "memory": [
                {"text": "Mel has been married for five years", "attributed_to": "user"},
                {"text": "Caroline went hiking last weekend", "attributed_to": "user"},
            ]
        }
    )
    try:
        ingest(celery_app, store, AddRequest(scope=scope, messages=[said("Mel", ANSWER)]))
    finally:
        fake_llm.reset()
    assert all("turn" not in m for m in memories_of(es, indices, scope))
    hits = search(celery_app.runtime.searcher, scope)
    assert hits and all(h.explain is not None and h.explain.reply_to is None for h in hits)
