"""Validity (``pipeline.domain.validity``): the closure rules as pure functions, the extraction
reply's ``replaces``, and whole jobs over the in-memory store: a newer fact closes the memory it
replaces, exactly once under replay, and a backfilled older fact is closed instead."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from itertools import permutations

from pipeline.adapters.llm.parse import parse_facts
from pipeline.domain.models import Scope
from pipeline.domain.state import JobState, Phase
from pipeline.domain.validity import (
    REPLACED_EVENT,
    Closure,
    Replacement,
    changes_of,
    closure_of,
    mem0_event,
    merged,
)
from pipeline.ingestion.phases import PHASES, run_phase
from pipeline.memory import Memory
from tests.doubles import ScriptedLLM
from tests.fakellm import listed_memories, with_replaced_numbers
from tests.unit.test_phases import conversation, make_deps, store_of

SCOPE = Scope(tenant="acme", user_id="maria")


def at(year: int) -> datetime:
    return datetime(year, 6, 1, tzinfo=UTC)


def source(text: str, year: int) -> dict[str, str]:
    return {"text": text, "observed_at": at(year).isoformat()}


def reply(text: str, replaces: list[int] | None = None) -> str:
    fact = {"text": text, "attributed_to": "user", "related": [], "replaces": replaces or []}
    return json.dumps({"memory": [fact]})


# -- the rules ----------------------------------------------------------------------------------


def test_the_older_memory_is_closed_at_the_newer_ones_time_whichever_was_named() -> None:
    sources = {"lisbon": source("Lives in Lisbon", 2023), "berlin": source("Lives in Berlin", 2024)}
    forward = closure_of(Replacement("berlin", "lisbon", SCOPE), sources)
    assert forward == Closure("lisbon", "berlin", at(2024), "Lives in Lisbon", "Lives in Berlin")
    backfill = closure_of(Replacement("lisbon", "berlin", SCOPE), sources)
    assert backfill == forward  # an older fact naming a newer memory is the one closed


def test_on_equal_times_the_named_memory_is_closed_and_a_missing_one_closes_nothing() -> None:
    sources = {"a": source("A", 2024), "b": source("B", 2024)}
    closure = closure_of(Replacement("b", "a", SCOPE), sources)
    assert closure is not None and (closure.closed, closure.by) == ("a", "b")
    assert closure_of(Replacement("b", "gone", SCOPE), sources) is None
    assert closure_of(Replacement("a", "a", SCOPE), sources) is None


def test_merging_is_the_same_in_any_order_and_a_second_time_writes_nothing() -> None:
    closures = [
        Closure("old", f"new{y}", at(y), "old text", f"new {y}") for y in (2026, 2024, 2025)
    ]
    results = []
    for order in permutations(closures):
        doc: dict[str, object] = {"text": "old text", "observed_at": at(2020).isoformat()}
        for closure in order:  # one job at a time, each merging over what the last wrote
            doc |= merged(doc, changes_of([closure])["old"]) or {}
        results.append(doc)
        assert merged(doc, changes_of(list(order))["old"]) is None  # a replay: nothing new
    assert all(r == results[0] for r in results)
    assert results[0]["valid_until"] == at(2024).isoformat()
    assert results[0]["replaced_by"] == ["new2024", "new2025", "new2026"]


def test_mem0_sees_a_replacement_as_an_update() -> None:
    assert mem0_event(REPLACED_EVENT) == "UPDATE" and mem0_event("ADD") == "ADD"


# -- the extraction reply ---------------------------------------------------------------------


def test_replaces_are_read_like_related_and_unknown_numbers_reported() -> None:
    raw = '{"memory": [{"text": "Lives in Berlin", "related": [1], "replaces": [0, 7, "1"]}]}'
    parsed = parse_facts(raw, known_ids=2)
    assert parsed.facts[0].replaces == (0, 1) and parsed.facts[0].related == (1,)
    assert parsed.unknown_ids == [7]
    assert parse_facts('{"memory": [{"text": "A"}]}', known_ids=2).facts[0].replaces == ()


def test_the_scripted_model_names_replaced_memories_by_their_number_in_the_prompt() -> None:
    request = {
        "messages": [
            {"role": "system", "content": "Stored:\n0. Lives in Lisbon\n1. Has a dog\n\nAnswer"},
            {"role": "user", "content": "7. not a memory"},
        ]
    }
    scripted = {"memory": [{"text": "Lives in Berlin", "replaces_text": ["Has a dog", "7"]}]}
    answered = json.loads(with_replaced_numbers(json.dumps(scripted), request))
    assert answered == {"memory": [{"text": "Lives in Berlin", "replaces": [1]}]}
    assert with_replaced_numbers("not json", request) == "not json"


# -- whole jobs ---------------------------------------------------------------------------------


def test_a_newer_fact_closes_the_one_it_replaces_records_it_and_answers_an_update() -> None:
    llm = ScriptedLLM(reply("Maria lives in Lisbon"), reply("Maria lives in Berlin", [0]))
    deps = make_deps(llm)
    memory = Memory(deps)
    lisbon = memory.add(conversation(("user", "I live in Lisbon"), timestamp=at(2023)))
    berlin = memory.add(conversation(("user", "I moved to Berlin"), timestamp=at(2024)))
    [old], [new] = lisbon["results"], berlin["results"]
    assert new == {
        "id": new["id"],
        "memory": "Maria lives in Berlin",
        "event": "UPDATE",
        "previous_memory": "Maria lives in Lisbon",
    }
    assert "0. Maria lives in Lisbon" in llm.system_prompts[1]
    store = store_of(deps)
    assert store.memories[old["id"]]["valid_until"] == at(2024).isoformat()
    assert store.memories[old["id"]]["replaced_by"] == [new["id"]]
    assert store.memories[new["id"]]["replaces"] == [old["id"]]
    rows = [r for r in store.history.values() if r["event"] == REPLACED_EVENT]
    assert [(r["memory_id"], r["old"], r["new"], r["replaced_by"]) for r in rows] == [
        (old["id"], "Maria lives in Lisbon", "Maria lives in Berlin", new["id"])
    ]
    record = store.get_job(berlin["job_id"])
    assert record is not None and record.counts["replaced"] == 1
    assert record.results[0].replaces[0].id == old["id"]


def test_a_replayed_persist_leaves_the_same_state() -> None:
    llm = ScriptedLLM(reply("Maria lives in Lisbon"), reply("Maria lives in Berlin", [0]))
    deps = make_deps(llm)
    Memory(deps).add(conversation(("user", "I live in Lisbon"), timestamp=at(2023)))
    request = conversation(("user", "I moved to Berlin"), timestamp=at(2024))
    state = JobState(job_id="berlin", request=request, received_at=at(2024))
    for spec in PHASES:
        if spec.phase is Phase.PERSIST:
            break
        state = run_phase(spec, state, deps)
    persist = next(spec for spec in PHASES if spec.phase is Phase.PERSIST)
    first = persist.run(state, deps)
    store = store_of(deps)
    after_first = copy.deepcopy((store.memories, store.history))
    again = persist.run(state, deps)  # the worker died before the state was saved
    assert (store.memories, store.history) == after_first
    assert again.stored == first.stored and again.counts == first.counts


def test_retrieval_shows_what_was_true_when_the_conversation_took_place() -> None:
    llm = ScriptedLLM(
        reply("Maria lives in Lisbon"),
        reply("Maria lives in Berlin", [0]),
        reply("Maria likes jazz"),
        reply("Maria lives in Porto"),
    )
    deps = make_deps(llm)
    memory = Memory(deps)
    memory.add(conversation(("user", "I live in Lisbon"), timestamp=at(2023)))
    memory.add(conversation(("user", "I moved to Berlin"), timestamp=at(2024)))
    memory.add(conversation(("user", "I like jazz"), timestamp=at(2025)))
    memory.add(conversation(("user", "I live in Porto"), timestamp=at(2022)))  # a backfill
    now, backfill = (listed(prompt) for prompt in llm.system_prompts[2:4])
    assert now == {"Maria lives in Berlin"}
    assert backfill == {"Maria lives in Berlin", "Maria lives in Lisbon", "Maria likes jazz"}


def listed(prompt: str) -> set[str]:
    """The stored memories a system prompt shows the model."""
    return set(listed_memories({"messages": [{"role": "system", "content": prompt}]}))
