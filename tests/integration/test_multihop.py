"""The second hop on the real node, with a real worker and the real local embedder: a question
about a person finds what that person said, where the words of the question lead elsewhere."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from pipeline.models import AddRequest, MessageIn, Role, Scope
from pipeline.search import Searcher, SearchHit, SearchQuery
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


def ranked(searcher: Searcher, scope: Scope, hop: bool = True) -> list[SearchHit]:
    return searcher.search(
        SearchQuery(query=QUESTION, scope=scope, top_k=10, hop=hop, explain=True)
    )


def test_a_question_about_a_person_finds_both_pieces_of_what_they_said(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    conversation(celery_app, scope)
    searcher = celery_app.runtime.searcher
    assert searcher.config.weight_hop > 0  # on by default
    hits = ranked(searcher, scope)
    for hit in hits:  # what Maria said is lifted, Jon's replies to her are not
        assert hit.explain is not None
        assert hit.explain.hop == (1.0 if hit.actor_id == "Maria" else 0.0)

    # The second piece shares no word with the question: without the hop, Jon's replies that
    # name her (one with "moved") come before it. Weighing 1, the hop puts what Maria said
    # first whatever the other signals say (the margin does not depend on the index's IDF).
    without = [h.memory for h in ranked(searcher, scope, hop=False)]
    assert set(without[:2]) != {FIRST, SECOND}
    strongest = replace(searcher, config=searcher.config.model_copy(update={"weight_hop": 1.0}))
    found = [h.memory for h in ranked(strongest, scope)]
    assert set(found[:2]) == {FIRST, SECOND}


def test_the_hop_brings_in_what_the_first_round_did_not_find(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    conversation(celery_app, scope)
    cousin = [
        said("Jon", f"Maria, my cousin moved to flat number {i} last year.") for i in range(15)
    ]
    lunch = [said("Maria", f"I had pasta for lunch on day {i}.") for i in range(8)]
    add(celery_app, scope, [*cousin, *lunch])
    searcher = celery_app.runtime.searcher
    # Each first-round list holds ten memories (top_k 10), which Jon's replies about moving
    # fill; Maria's entity (linked to all she said) only boosts what they found (a hub from one
    # link on). Her second memory shares no word with the question: not a first-round
    # candidate. Weighing 1, the hop ranks what Maria said first.
    narrow = replace(
        searcher,
        config=searcher.config.model_copy(
            update={"candidates_per_signal": 10, "entity_links_per_entity": 1, "weight_hop": 1.0}
        ),
    )
    query = SearchQuery(query=QUESTION, scope=scope, top_k=10, explain=True)
    assert SECOND not in [h.memory for h in narrow.search(query.model_copy(update={"hop": False}))]
    hits = narrow.search(query)
    assert {h.actor_id for h in hits} == {"Maria"}
    hit = next(h for h in hits if h.memory == SECOND)
    assert hit.explain is not None and hit.explain.hop == 1.0
    assert (hit.explain.rank_semantic, hit.explain.rank_bm25, hit.explain.rank_entity) == (
        None,
        None,
        None,
    )


def test_a_name_nobody_speaks_under_changes_no_ranking(
    celery_app: MemqCelery, worker: WorkerProcess, scope: Scope
) -> None:
    conversation(celery_app, scope)
    searcher = celery_app.runtime.searcher
    query = "Where did Gina move from?"
    on = searcher.search(SearchQuery(query=query, scope=scope, top_k=10))
    off = searcher.search(SearchQuery(query=query, scope=scope, top_k=10, hop=False))
    assert [h.memory for h in on] == [h.memory for h in off]
