"""The second hop on the real node, with a real worker and the real local embedder: a question
about a person finds what that person said, where the words of the question lead elsewhere."""

from __future__ import annotations

import uuid
from dataclasses import replace

import numpy as np
import pytest

from pipeline.domain.models import AddRequest, MessageIn, Role, Scope
from pipeline.serving.search import Searcher, SearchHit, SearchQuery
from pipeline.store.elastic import scope_filter
from pipeline.store.queries import hits_of, vector_of, vectors_body
from tests.integration.test_pipeline import wait_job
from tests.processes import WorkerProcess
from workers.app import MemqCelery
from workers.intake import submit

pytestmark = pytest.mark.integration

FIRST = "I moved here from my home country four years ago."
SECOND = "This necklace was my grandma's, back in Sweden. It means a lot to me."
QUESTION = "Where did Maria move from?"
MOVED_DESK = "Thanks Maria, I moved my desk near the window."


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="multihop", user_id=f"chat-{uuid.uuid4().hex[:8]}")


def said(name: str, text: str) -> MessageIn:
    return MessageIn(role=Role.USER, content=text, name=name)


def conversation(app: MemqCelery, scope: Scope) -> None:
    """Two sessions between Maria and Jon. Maria never says her own name; Jon says it in
    nearly every reply, as people do."""
    replies = [
        "Wow Maria, that is a big change!",
        "Maria, where did you go hiking last weekend?",
        MOVED_DESK,
        "Maria, where is the party?",
        "Good to hear from you Maria!",
        "Maria, which bakery do you like?",
        "That sounds lovely, Maria.",
        "Maria, is the new place near the station?",
    ]
    sessions = [
        [said("Maria", FIRST), *(said("Jon", r) for r in replies[:4])],
        [said("Maria", SECOND), *(said("Jon", r) for r in replies[4:])],
    ]
    for messages in sessions:
        add(app, scope, messages)


def add(app: MemqCelery, scope: Scope, messages: list[MessageIn]) -> None:
    request = AddRequest(scope=scope, messages=messages, infer=False)
    record = wait_job(app.runtime.store, submit(app, request).record.job_id)
    assert record.status == "succeeded", record.reason
    app.runtime.es.indices.refresh(index=app.runtime.store.names.memories)  # searched at once


def ranked(searcher: Searcher, scope: Scope, hop: bool = True) -> list[SearchHit]:
    """The hop's ranking alone: the reply to the best hit (pipeline.serving.replies) would take
    second place, and is tested on its own (tests/integration/test_replies.py)."""
    return searcher.search(
        SearchQuery(query=QUESTION, scope=scope, top_k=10, hop=hop, explain=True, reply=False)
    )


def test_what_a_named_person_said_gets_the_hop_signal(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    conversation(celery_app, scope)
    searcher = celery_app.runtime.searcher
    assert searcher.config.weight_hop > 0  # on by default
    hits = ranked(searcher, scope)
    for hit in hits:  # what Maria said is lifted, Jon's replies to her are not
        assert hit.explain is not None
        assert hit.explain.hop == (1.0 if hit.actor_id == "Maria" else 0.0)


def test_a_question_about_a_person_finds_the_second_piece_of_what_they_said(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    conversation(celery_app, scope)
    searcher = celery_app.runtime.searcher
    # The second piece shares no word with the question: without the hop, Jon's replies that
    # name her come before it. Weighing 1, the hop puts what Maria said first whatever the
    # other signals say (a margin that does not depend on the index's term statistics).
    without = [h.memory for h in ranked(searcher, scope, hop=False)]
    assert set(without[:2]) != {FIRST, SECOND}
    strongest = replace(searcher, config=searcher.config.model_copy(update={"weight_hop": 1.0}))
    assert set([h.memory for h in ranked(strongest, scope)][:2]) == {FIRST, SECOND}


def test_a_name_nobody_speaks_under_lifts_nothing(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    conversation(celery_app, scope)
    searcher = celery_app.runtime.searcher
    query = SearchQuery(query="Where did Gina move from?", scope=scope, top_k=10, explain=True)
    hits = searcher.search(query)
    assert hits and all(h.explain is not None and h.explain.hop == 0.0 for h in hits)
    off = searcher.search(query.model_copy(update={"hop": False}))
    assert off and all(h.explain is not None and h.explain.hop is None for h in off)


def test_vectors_read_as_bytes_are_the_vectors_stored(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    """Round 2 and the hop read vectors from doc values as bytes (``VECTOR_FIELDS``): the same
    float32s as the vectors in the memories' source."""
    add(celery_app, scope, [said("Maria", FIRST), said("Jon", MOVED_DESK)])
    store = celery_app.runtime.store
    clauses = scope_filter(scope)
    as_json = {
        "size": 10,
        "_source": {"includes": ["embedding"], "exclude_vectors": False},
        "query": {"bool": {"filter": clauses}},
    }
    (listed,) = store.search_indices([("memories", scope, as_json)], "test")
    stored = {h["_id"]: h["_source"]["embedding"] for h in hits_of(listed)}
    assert len(stored) == 2
    body = vectors_body(list(stored), clauses)
    (read,) = store.search_indices([("memories", scope, body)], "test")
    got = {h["_id"]: vector_of(h) for h in hits_of(read)}
    assert got.keys() == stored.keys()
    for memory, vector in stored.items():
        assert len(vector) == 384
        assert np.array_equal(np.asarray(vector, np.float32), np.asarray(got[memory], np.float32))
