"""Each phase, and whole jobs, over in-memory implementations of the store/embedder/LLM."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from pipeline.adapters.llm.parse import FactsReply
from pipeline.adapters.nlp.entities import RuleEntityExtractor
from pipeline.adapters.nlp.lemmatize import SimplemmaLemmatizer, normalize_for_hash
from pipeline.domain.jobs import JobStatus
from pipeline.domain.models import (
    AddRequest,
    MemoryType,
    MessageIn,
    Scope,
    md5_hex,
    memory_id,
    message_id,
)
from pipeline.domain.state import JobState, Phase
from pipeline.errors import PermanentError, TransientError
from pipeline.features.webhook import WebhookSender
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases import PHASES, run_job, run_phase
from pipeline.ingestion.phases.extract import NO_LLM, turns_of
from pipeline.memory import Memory
from pipeline.store.memory import InMemoryStore
from pipeline.store.protocol import MemoryDoc
from tests.doubles import HashEmbedder, ScriptedLLM

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
ALICE = Scope(tenant="acme", user_id="alice")


def facts_reply(*texts: str, related: list[int] | None = None) -> str:
    return json.dumps(
        {"memory": [{"text": t, "attributed_to": "user", "related": related or []} for t in texts]}
    )


def make_deps(
    llm: ScriptedLLM | None = None, embedder: HashEmbedder | None = None, **kw: object
) -> Deps:
    return Deps(
        store=InMemoryStore(),
        embedder=embedder or HashEmbedder(),
        lemmatizer=SimplemmaLemmatizer(),
        entities=RuleEntityExtractor(),
        llm=llm,
        clock=lambda: NOW,
        **kw,  # type: ignore[arg-type]
    )


def conversation(*turns: tuple[str, str], scope: Scope = ALICE, **kw: object) -> AddRequest:
    messages = [MessageIn(role=role, content=text) for role, text in turns]  # type: ignore[arg-type]
    return AddRequest(scope=scope, messages=messages, **kw)  # type: ignore[arg-type]


def store_of(deps: Deps) -> InMemoryStore:
    assert isinstance(deps.store, InMemoryStore)
    return deps.store


def test_a_full_job_stores_memories_history_entities_messages_and_a_record() -> None:
    llm = ScriptedLLM(facts_reply("Alice moved to Lisbon in 2025", "Alice is vegetarian"))
    deps = make_deps(llm)
    request = conversation(("user", "I moved to Lisbon last year. I don't eat meat."))
    result = Memory(deps).add(request)
    store = store_of(deps)
    assert sorted(r["memory"] for r in result["results"]) == [
        "Alice is vegetarian",
        "Alice moved to Lisbon in 2025",
    ]
    assert len(store.memories) == 2 and len(store.history) == 2
    lisbon = next(m for m in store.memories.values() if "Lisbon" in m["text"])
    assert lisbon["text_lemmatized"] == "alice move to lisbon in 2025"
    assert lisbon["tenant"] == "acme" and lisbon["user_id"] == "alice"
    linked = {store.entities[e]["text"] for e in lisbon["entity_ids"]}
    assert linked == {"Alice", "Lisbon"}
    assert [m.content for m in store.recent_messages(ALICE, 10)] == [request.messages[0].text()]
    record = store.get_job(result["job_id"])
    assert record is not None and record.status == JobStatus.SUCCEEDED
    assert record.counts["stored"] == 2
    assert set(record.timings_ms) >= {"context", "extract", "persist", "link"}


def test_one_llm_call_one_batch_embedding_for_the_facts() -> None:
    llm = ScriptedLLM(
        facts_reply("Alice likes jazz", "Alice plays the piano", "Alice lives in Oslo")
    )
    embedder = HashEmbedder()
    Memory(make_deps(llm, embedder)).add(conversation(("user", "jazz, piano, Oslo")))
    assert len(llm.calls) == 1
    fact_batches = [call for call in embedder.calls if len(call) == 3]
    assert fact_batches == [["Alice likes jazz", "Alice plays the piano", "Alice lives in Oslo"]]


def test_posting_the_same_conversation_twice_stores_one_set() -> None:
    llm = ScriptedLLM(facts_reply("Alice likes jazz"), facts_reply("Alice likes jazz"))
    deps = make_deps(llm)
    memory = Memory(deps)
    first = memory.add(conversation(("user", "I like jazz")))
    second = memory.add(conversation(("user", "I like jazz")))
    assert first == second
    assert len(store_of(deps).memories) == 1
    assert len(llm.calls) == 1


def test_dedup_covers_the_whole_scope_not_only_the_retrieved_ten() -> None:
    deps = make_deps(ScriptedLLM(default=facts_reply("Alice likes jazz.")))
    store = store_of(deps)
    for i in range(30):  # fill the scope with unrelated memories, so top-10 would miss it
        Memory(deps).add(conversation(("user", f"unrelated fact number {i}")), job_id=f"filler-{i}")
    assert len(store.memories) == 1
    deps2 = make_deps(ScriptedLLM(facts_reply("alice likes   jazz")))
    deps2 = Deps(**{**deps2.__dict__, "store": store})
    Memory(deps2).add(conversation(("user", "jazz again")))
    assert len(store.memories) == 1  # same normalized text: not stored again


def test_dedup_within_one_batch() -> None:
    deps = make_deps(
        ScriptedLLM(facts_reply("Alice likes jazz", "Alice likes jazz.", "Alice likes tea"))
    )
    result = Memory(deps).add(conversation(("user", "jazz and tea")))
    assert len(result["results"]) == 2
    record = store_of(deps).get_job(result["job_id"])
    assert record is not None and record.counts["duplicates"] == 1


def test_memories_of_another_scope_are_not_duplicates() -> None:
    deps = make_deps(ScriptedLLM(default=facts_reply("Likes jazz")))
    Memory(deps).add(conversation(("user", "jazz")))
    Memory(deps).add(conversation(("user", "jazz"), scope=Scope(tenant="acme", user_id="bob")))
    Memory(deps).add(conversation(("user", "jazz"), scope=Scope(tenant="other", user_id="alice")))
    assert len(store_of(deps).memories) == 3


def test_a_failing_batch_falls_back_to_items_and_reports_the_one_that_fails() -> None:
    embedder = HashEmbedder(fail_on=lambda texts: len(texts) > 1 or "poison" in texts[0])
    deps = make_deps(
        ScriptedLLM(facts_reply("Alice likes jazz", "poison fact", "Alice likes tea")), embedder
    )
    request = conversation(("user", "x"), infer=True)
    state = JobState(job_id="j1", request=request, received_at=NOW)
    for spec in PHASES:
        if spec.phase is Phase.RETRIEVE:
            continue  # its single-text embedding would not fail anyway
        state = spec.run(state, deps)
    assert [m.text for m in state.stored] == ["Alice likes jazz", "Alice likes tea"]
    assert [(e.phase, e.text) for e in state.errors] == [(Phase.EMBED, "poison fact")]
    record = store_of(deps).get_job("j1")
    assert record is not None and record.errors[0]["text"] == "poison fact"


def test_garbage_from_the_llm_fails_the_job_with_the_raw_reply() -> None:
    deps = make_deps(ScriptedLLM("I am sorry, I cannot do JSON today"))
    with pytest.raises(PermanentError) as caught:
        Memory(deps).add(conversation(("user", "hello")))
    record = store_of(deps).get_job(conversation(("user", "hello")).job_id())
    assert record is not None and record.status == JobStatus.FAILED and record.phase == "extract"
    assert "cannot do JSON today" in (record.reason or "") and caught.value.reason == record.reason
    assert store_of(deps).memories == {}


def test_a_transient_failure_outlasting_retries_makes_the_job_dead() -> None:
    deps = make_deps(ScriptedLLM(TransientError("LLM timeout")))
    with pytest.raises(TransientError):
        Memory(deps).add(conversation(("user", "hello")))
    record = store_of(deps).get_job(conversation(("user", "hello")).job_id())
    assert record is not None and record.status == JobStatus.DEAD


def test_without_an_llm_infer_needs_one_but_verbatim_works() -> None:
    deps = make_deps(llm=None)
    with pytest.raises(PermanentError, match="no LLM is configured"):
        Memory(deps).add(conversation(("user", "I like jazz")))
    assert NO_LLM
    result = Memory(deps).add(
        conversation(
            ("system", "be nice"), ("user", "I like jazz"), ("assistant", "Noted!"), infer=False
        )
    )
    texts = {m["text"]: m["attributed_to"] for m in store_of(deps).memories.values()}
    assert texts == {"I like jazz": "user", "Noted!": "assistant"}
    assert len(result["results"]) == 2


def test_verbatim_turns_are_deduplicated_too() -> None:
    deps = make_deps(llm=None)
    Memory(deps).add(conversation(("user", "I like jazz"), ("user", "I like jazz"), infer=False))
    Memory(deps).add(conversation(("user", "i like jazz."), infer=False))
    assert len(store_of(deps).memories) == 1


def test_procedural_memory_is_one_summary_of_the_agent() -> None:
    llm = ScriptedLLM(
        json.dumps(
            {"memory": [{"text": "Step 1 searched; step 2 booked", "attributed_to": "assistant"}]}
        )
    )
    deps = make_deps(llm)
    scope = Scope(tenant="acme", agent_id="planner")
    request = conversation(
        ("user", "book a flight"),
        ("assistant", "searched, booked"),
        scope=scope,
        memory_type="procedural_memory",
    )
    result = Memory(deps).add(request)
    assert len(result["results"]) == 1
    stored = next(iter(store_of(deps).memories.values()))
    assert stored["memory_type"] == "procedural_memory" and stored["agent_id"] == "planner"
    assert (
        "execution" in llm.system_prompts[0].lower() or "procedur" in llm.system_prompts[0].lower()
    )


def test_procedural_memory_needs_an_agent() -> None:
    with pytest.raises(ValueError, match="agent_id"):
        conversation(("user", "x"), memory_type="procedural_memory")


def test_agent_perspective_when_the_scope_is_an_agent_that_spoke() -> None:
    llm = ScriptedLLM()
    deps = make_deps(llm)
    scope = Scope(agent_id="helper")
    Memory(deps).add(
        conversation(("user", "who are you?"), ("assistant", "I am a travel agent"), scope=scope)
    )
    Memory(deps).add(conversation(("user", "I like tea")))
    agent_prompt, user_prompt = llm.system_prompts
    assert agent_prompt != user_prompt
    assert "ASSISTANT" in agent_prompt or "agent" in agent_prompt.lower()


def test_a_custom_prompt_replaces_the_default() -> None:
    llm = ScriptedLLM()
    Memory(make_deps(llm)).add(conversation(("user", "hi"), prompt="Only keep facts about food."))
    assert llm.system_prompts[0].startswith("Only keep facts about food.")
    assert '{"memory"' in llm.system_prompts[0]


def test_observation_date_is_the_conversations_own_timestamp() -> None:
    llm = ScriptedLLM(facts_reply("Alice adopted a cat"))
    deps = make_deps(llm)
    when = datetime(2019, 3, 4, 10, 30, tzinfo=UTC)
    Memory(deps).add(conversation(("user", "I adopted a cat yesterday"), timestamp=when))
    assert "2019-03-04" in llm.system_prompts[0]
    stored = next(iter(store_of(deps).memories.values()))
    assert stored["observed_at"] == when.isoformat()
    assert store_of(deps).recent_messages(ALICE, 1)[0].content == "I adopted a cat yesterday"


def test_existing_memories_are_numbered_and_mapped_back_to_ids() -> None:
    deps = make_deps(ScriptedLLM(facts_reply("Alice likes jazz music")))
    Memory(deps).add(conversation(("user", "I like jazz")))
    jazz_id = next(iter(store_of(deps).memories))
    llm = ScriptedLLM(facts_reply("Alice saw a jazz concert in Oslo", related=[0, 7]))
    deps2 = Deps(**{**make_deps(llm).__dict__, "store": deps.store})
    request = conversation(("user", "I went to a jazz concert in Oslo"))
    state = run_job(JobState(job_id="j2", request=request, received_at=NOW), deps2)
    assert "0. Alice likes jazz music" in llm.system_prompts[0]
    assert state.facts[0].related_ids == (jazz_id,)  # 7 was unknown: ignored


def test_the_window_gives_the_llm_the_last_ten_messages() -> None:
    llm = ScriptedLLM()
    deps = make_deps(llm)
    for i in range(12):
        Memory(deps).add(conversation(("user", f"message {i}")))
    last_prompt = llm.calls[-1][1].content
    assert "message 10" in last_prompt and "message 1\n" in last_prompt
    assert "message 0\n" not in last_prompt


def test_persist_run_twice_after_a_crash_reports_the_same_and_writes_once() -> None:
    deps = make_deps(ScriptedLLM(facts_reply("Alice likes jazz", "Alice likes tea")))
    state = JobState(job_id="crash", request=conversation(("user", "x")), received_at=NOW)
    for spec in PHASES:
        if spec.phase is Phase.PERSIST:
            break
        state = spec.run(state, deps)
    persist = next(s for s in PHASES if s.phase is Phase.PERSIST)
    first = persist.run(state, deps)
    again = persist.run(state, deps)  # the worker died before saving the state: re-run
    assert [m.id for m in again.stored] == [m.id for m in first.stored]
    assert len(store_of(deps).memories) == 2 and len(store_of(deps).history) == 2


def test_a_job_run_again_from_the_start_keeps_and_reports_its_own_memories() -> None:
    """A replay (the first attempt stored its memories, then failed later): dedup does not
    take the job's own memories for duplicates, so the rerun reports them, written once."""
    deps = make_deps(ScriptedLLM(default=facts_reply("Alice likes jazz", "Alice likes tea")))
    request = conversation(("user", "x"))
    first = run_job(JobState(job_id="again", request=request, received_at=NOW), deps)
    rerun = run_job(JobState(job_id="again", request=request, received_at=NOW, attempts=1), deps)
    assert [m.id for m in rerun.stored] == [m.id for m in first.stored] and len(rerun.stored) == 2
    assert rerun.counts["duplicates"] == 0
    assert len(store_of(deps).memories) == 2
    other = run_job(JobState(job_id="other", request=request, received_at=NOW), deps)
    assert other.stored == [] and other.counts["duplicates"] == 2  # another job's: duplicates


def test_an_id_held_by_an_edited_memory_moves_the_fact_to_a_job_id() -> None:
    deps = make_deps(ScriptedLLM(facts_reply("Alice likes jazz")))
    text_hash = md5_hex(normalize_for_hash("Alice likes jazz"))
    taken = memory_id(ALICE, text_hash)
    edited = MemoryDoc(
        id=taken,
        scope=ALICE,
        text="Alice loves jazz (edited)",
        text_lemmatized="",
        embedding=[1.0] + [0.0] * 383,
        hash="other-hash",
        job_id="old",
        created_at=NOW,
        observed_at=NOW,
    )
    store_of(deps).create_memories([edited])
    result = Memory(deps).add(conversation(("user", "jazz")))
    assert len(store_of(deps).memories) == 2
    assert result["results"][0]["id"] != taken


def test_a_lost_race_on_the_same_fact_is_a_duplicate_not_a_second_memory() -> None:
    deps = make_deps(ScriptedLLM(facts_reply("Alice likes jazz")))
    state = JobState(job_id="late", request=conversation(("user", "x")), received_at=NOW)
    persist = next(i for i, spec in enumerate(PHASES) if spec.phase is Phase.PERSIST)
    for spec in PHASES[:persist]:  # every phase before persist: nothing stored yet
        state = spec.run(state, deps)
    winner = JobState(job_id="early", request=conversation(("user", "y")), received_at=NOW)
    winner_deps = Deps(
        **{**make_deps(ScriptedLLM(facts_reply("Alice likes jazz"))).__dict__, "store": deps.store}
    )
    run_job(winner, winner_deps)
    state = PHASES[persist].run(state, deps)
    assert state.stored == [] and state.counts["duplicates"] == 1
    assert len(store_of(deps).memories) == 1


def test_images_are_described_when_vision_is_on_and_dropped_otherwise() -> None:
    parts = [
        {"type": "text", "text": "look at my dog"},
        {"type": "image_url", "image_url": {"url": "https://example.org/dog.jpg"}},
    ]
    request = AddRequest(
        scope=ALICE,
        messages=[MessageIn.model_validate({"role": "user", "content": parts})],
        infer=False,
    )
    llm = ScriptedLLM()
    public = WebhookSender(resolve=lambda host, port: ["93.184.215.14"])
    seen = make_deps(llm, vision=True, webhooks=public)
    Memory(seen).add(request)
    assert llm.images == ["https://example.org/dog.jpg"]
    assert "[image] a photo at dog.jpg" in next(iter(store_of(seen).memories.values()))["text"]
    blind = make_deps(ScriptedLLM(), vision=False)
    Memory(blind).add(request)
    assert [m["text"] for m in store_of(blind).memories.values()] == ["look at my dog"]


def test_similar_entities_merge_and_links_accumulate() -> None:
    deps = make_deps(
        ScriptedLLM(facts_reply("Alice visited Lisbon"), facts_reply("Alice loves Lisbon food"))
    )
    Memory(deps).add(conversation(("user", "a")))
    Memory(deps).add(conversation(("user", "b")))
    store = store_of(deps)
    lisbon = [e for e in store.entities.values() if e["normalized"] == "lisbon"]
    assert len(lisbon) == 1 and len(lisbon[0]["linked_memory_ids"]) == 2


def test_metadata_cannot_carry_identity() -> None:
    request = conversation(("user", "x"), metadata={"user_id": "mallory", "topic": "music"})
    assert request.metadata == {"topic": "music"}


def test_extraction_asks_for_the_reply_schema_and_records_the_tokens() -> None:
    reply = facts_reply("Alice plays the cello")
    llm = ScriptedLLM(reply)
    deps = make_deps(llm)

    result = Memory(deps).add(conversation(("user", "I play the cello on Sundays")))

    assert llm.reply_models == [FactsReply]
    record = store_of(deps).get_job(result["job_id"])
    assert record is not None
    prompt = sum(len(m.content.split()) for m in llm.calls[0])
    assert record.counts["prompt_tokens"] == prompt > 0
    assert record.counts["completion_tokens"] == len(reply.split())
    assert record.counts["llm_calls"] == 1


def test_a_job_without_a_model_call_records_no_tokens() -> None:
    deps = make_deps(ScriptedLLM())

    result = Memory(deps).add(conversation(("user", "verbatim please"), infer=False))

    record = store_of(deps).get_job(result["job_id"])
    assert record is not None and "prompt_tokens" not in record.counts


@pytest.mark.parametrize("memory_type", [None, MemoryType.SEMANTIC, MemoryType.EPISODIC])
def test_every_llm_extraction_is_shown_the_existing_memories(
    memory_type: MemoryType | None,
) -> None:
    deps = make_deps(ScriptedLLM(facts_reply("Alice likes jazz music")))
    Memory(deps).add(conversation(("user", "I like jazz")))
    llm = ScriptedLLM(facts_reply("Alice saw a jazz concert"))
    later = Deps(**{**make_deps(llm).__dict__, "store": deps.store})
    request = conversation(("user", "I went to a jazz concert"), memory_type=memory_type)
    state = run_job(JobState(job_id="typed", request=request, received_at=NOW), later)
    assert [m.text for m in state.existing] == ["Alice likes jazz music"]
    assert "0. Alice likes jazz music" in llm.system_prompts[0]


def test_jobs_no_llm_extracts_facts_from_retrieve_nothing() -> None:
    deps = make_deps(ScriptedLLM(facts_reply("Alice likes jazz music")))
    Memory(deps).add(conversation(("user", "I like jazz")))
    request = conversation(("user", "I like jazz concerts"), infer=False)
    state = run_job(JobState(job_id="verbatim", request=request, received_at=NOW), deps)
    assert state.existing == [] and not request.extracts_facts()


def test_memories_are_created_with_their_entities_and_written_once() -> None:
    """Link decides the entities before persist, so each memory is created with its
    ``entity_ids`` and the entities name it back."""
    deps = make_deps(ScriptedLLM(facts_reply("Alice moved to Berlin", "Bob repairs scooters")))
    state = run_job(
        JobState(job_id="j", request=conversation(("user", "x")), received_at=NOW), deps
    )
    store = store_of(deps)
    assert len(state.stored) == 2
    for memory in state.stored:
        held = store.memories[memory.id]["entity_ids"]
        assert held, memory
        assert all(memory.id in store.entities[e]["linked_memory_ids"] for e in held)
    assert sorted({e for m in state.stored for e in store.memories[m.id]["entity_ids"]}) == (
        state.entity_ids
    )


def test_a_job_that_persisted_before_it_linked_is_linked_in_link() -> None:
    """A state saved by a release that ran link after persist: persist is done, nothing is
    planned. Link then links the stored memories themselves, on both sides."""
    deps = make_deps(ScriptedLLM(facts_reply("Alice moved to Berlin")))
    state = JobState(job_id="old-order", request=conversation(("user", "x")), received_at=NOW)
    order = [spec.phase for spec in PHASES]
    for spec in PHASES[: order.index(Phase.LINK)]:
        state = run_phase(spec, state, deps)
    state = run_phase(PHASES[order.index(Phase.PERSIST)], state, deps)
    [memory] = state.stored
    store = store_of(deps)
    assert store.memories[memory.id]["entity_ids"] == [] and state.entity_ids == []

    state = run_phase(PHASES[order.index(Phase.LINK)], state, deps)

    assert state.entity_ids and store.memories[memory.id]["entity_ids"] == state.entity_ids
    assert all(store.entities[e]["linked_memory_ids"] == [memory.id] for e in state.entity_ids)


@pytest.mark.parametrize("inside", ["169.254.169.254", "64:ff9b::7f00:1", "192.0.0.8"])
def test_an_image_url_inside_the_deployment_never_reaches_the_llm(inside: str) -> None:
    parts = [{"type": "image_url", "image_url": {"url": "http://metadata.example/latest"}}]
    request = AddRequest(
        scope=ALICE,
        messages=[MessageIn.model_validate({"role": "user", "content": parts})],
        infer=False,
    )
    llm = ScriptedLLM()
    deps = make_deps(llm, vision=True, webhooks=WebhookSender(resolve=lambda h, p: [inside]))
    with pytest.raises(PermanentError, match="image URL refused"):
        turns_of(request, deps)
    assert llm.images == []


def test_a_raw_turn_names_its_own_message_counted_in_the_whole_request() -> None:
    deps = make_deps(llm=None)
    request = conversation(
        ("system", "be nice"), ("user", "I like jazz"), ("assistant", "Noted!"), infer=False
    )
    job = Memory(deps).add(request)["job_id"]
    sources = {m["text"]: m["source_ids"] for m in store_of(deps).memories.values()}
    assert sources == {"I like jazz": [message_id(job, 1)], "Noted!": [message_id(job, 2)]}
    assert {m["turn"] for m in store_of(deps).memories.values()} == {0, 1}  # turn skips system


def test_an_extracted_fact_names_the_messages_the_llm_was_given_as_new() -> None:
    image_only = [{"type": "image_url", "image_url": {"url": "https://example.org/a.jpg"}}]
    messages = [
        MessageIn(role="user", content="I moved to Lisbon"),  # type: ignore[arg-type]
        MessageIn.model_validate({"role": "user", "content": image_only}),
        MessageIn(role="assistant", content="Nice city!"),  # type: ignore[arg-type]
    ]
    deps = make_deps(ScriptedLLM(facts_reply("Alice lives in Lisbon", "Alice likes cities")))
    job = Memory(deps).add(AddRequest(scope=ALICE, messages=messages))["job_id"]
    # the image was not shown to the model (vision off): not a source
    expected = [message_id(job, 0), message_id(job, 2)]
    assert [m["source_ids"] for m in store_of(deps).memories.values()] == [expected, expected]
