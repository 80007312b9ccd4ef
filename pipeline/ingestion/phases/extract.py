"""Phase 2: facts from the conversation — one LLM call, ADD-only.

Three paths: LLM extraction (the default), procedural memory (one LLM summary, one memory), and
``infer=False`` (every non-system message kept verbatim, no LLM). Images are described by the
LLM first when vision is on; otherwise only the text parts are used.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

from pipeline.adapters.llm.parse import FactsReply, ParsedFacts, parse_facts
from pipeline.domain.models import (
    AddRequest,
    ContextMessage,
    ExistingMemory,
    Fact,
    MemoryType,
    Role,
)
from pipeline.domain.protocols import LLM, ChatMessage, TokenUsage
from pipeline.domain.state import JobState
from pipeline.errors import MemqError, PermanentError
from pipeline.features.usage import check_spendable
from pipeline.ingestion.batch import BatchResult
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.prompts import load_prompt

log = logging.getLogger("memq.extract")

NO_LLM = (
    "no LLM is configured (set MEMQ_LLM_BASE_URL or OPENAI_API_KEY), so only infer=false "
    "conversations can be ingested"
)


@dataclass(frozen=True)
class Turn:
    role: Role
    name: str | None
    text: str
    seq: int = 0  # the message's place in the request (``models.message_id``)


def extract_facts(state: JobState, deps: Deps) -> JobState:
    """Fill ``state.facts``, and add the LLM tokens spent to ``state.counts``
    (``prompt_tokens``, ``completion_tokens``, ``llm_calls``). Raises ``PermanentError`` when
    the LLM's reply stays unusable (the raw reply is in the reason), when extraction needs an
    LLM and there is none, and (``BudgetSpentError``) when it needs one and the tenant's monthly
    token budget is spent."""
    check_spendable(state.request, deps.vision, deps.usage, deps.clock())
    usage = TokenUsage()
    facts = facts_of(state, deps, usage)
    return state.with_(facts=facts, counts=with_usage(state.counts, usage))


def facts_of(state: JobState, deps: Deps, usage: TokenUsage) -> list[Fact]:
    request = state.request
    turns = turns_of(request, deps, usage)
    if request.extracts_facts():
        return inferred_facts(require_llm(deps), state, turns, usage)
    if request.memory_type is MemoryType.PROCEDURAL:
        return procedural_facts(require_llm(deps), request, turns, state, usage)
    return verbatim_facts(request, turns)


def with_usage(counts: dict[str, int], usage: TokenUsage) -> dict[str, int]:
    """``counts`` plus the tokens of ``usage`` (unchanged when no model was called)."""
    if usage.calls == 0:
        return counts
    added = {key: counts.get(key, 0) + value for key, value in usage.counts().items()}
    return {**counts, **added}


def extract_facts_batch(states: Sequence[JobState], deps: Deps) -> BatchResult:
    """Each job's own LLM call, run concurrently (the LLM adapter bounds how many are in flight
    at once for the whole process). A reply that cannot be used fails only its own job."""
    outcomes = dict(done for done in extract_each(states, deps) if done is not None)
    result = BatchResult()
    for state in states:
        outcome = outcomes[state.job_id]
        if isinstance(outcome, MemqError):
            result.failures[state.job_id] = outcome
        else:
            result.states.append(outcome)
    return result


Outcome = tuple[str, JobState | MemqError]


def extract_each(
    states: Sequence[JobState], deps: Deps, tick_s: float | None = None
) -> Iterator[Outcome | None]:
    """(job id, its new state or the error that stopped it) for each job, in the order the
    calls end, so a driver can send the jobs that are done on while the slowest calls still
    run (``workers.scheduler.waves``); with ``tick_s``, None after each ``tick_s`` in which no call
    ended, so that driver can act on time alone. The calls run concurrently, as in
    ``extract_facts_batch``."""
    if not states:
        return
    if len(states) == 1 and tick_s is None:  # no thread for a lone job nobody times
        yield states[0].job_id, attempt(states[0], deps)
        return
    workers = min(len(states), deps.limits.llm_concurrency)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memq-extract") as pool:
        pending = {pool.submit(attempt, state, deps): state.job_id for state in states}
        while pending:
            ended, _ = wait(pending, timeout=tick_s, return_when=FIRST_COMPLETED)
            if not ended:
                yield None
            for call in ended:
                yield pending.pop(call), call.result()


def attempt(state: JobState, deps: Deps) -> JobState | MemqError:
    try:
        return extract_facts(state, deps)
    except MemqError as exc:
        return exc


def require_llm(deps: Deps) -> LLM:
    if deps.llm is None:
        raise PermanentError(NO_LLM)
    return deps.llm


def turns_of(request: AddRequest, deps: Deps, usage: TokenUsage | None = None) -> list[Turn]:
    """Each message as text; image parts become LLM descriptions when vision is on."""
    turns = []
    for seq, message in enumerate(request.messages):
        parts = [message.text()]
        if deps.vision and deps.llm is not None:
            llm, prompt = deps.llm, load_prompt("vision").text
            urls = [fetchable(url, deps) for url in message.images()]
            parts += [f"[image] {llm.describe_image(u, prompt, usage)}" for u in urls]
        text = "\n".join(p for p in parts if p.strip()).strip()
        if text:
            turns.append(Turn(message.role, message.name, text, seq))
    return turns


def fetchable(url: str, deps: Deps) -> str:
    """``url`` when the LLM may be given it: a data: URL, or an http(s) URL the webhook guard
    allows (the LLM server fetches it from inside the deployment); ``PermanentError`` naming
    the reason otherwise."""
    if url.startswith("data:"):
        return url
    refused = deps.webhooks.refusal(url)
    if refused is not None:
        raise PermanentError(f"image URL refused: {refused}")
    return url


def verbatim_facts(request: AddRequest, turns: list[Turn]) -> list[Fact]:
    """infer=False: each non-system message is a memory as written."""
    said = [turn for turn in turns if turn.role is not Role.SYSTEM]
    return [
        Fact(
            text=turn.text,
            attributed_to="assistant" if turn.role is Role.ASSISTANT else "user",
            role=turn.role.value,
            actor_id=turn.name or request.actor_id,
            turn=place,
            source_seqs=(turn.seq,),
        )
        for place, turn in enumerate(said)
    ]


def agent_perspective(request: AddRequest, turns: list[Turn]) -> bool:
    """Facts are about the agent when the scope is an agent's and the agent spoke."""
    return (
        request.scope.agent_id is not None
        and request.scope.user_id is None
        and any(t.role is Role.ASSISTANT for t in turns)
    )


def inferred_facts(
    llm: LLM, state: JobState, turns: list[Turn], usage: TokenUsage | None = None
) -> list[Fact]:
    request = state.request
    if request.prompt:
        system = request.prompt + "\n\n" + load_prompt("output_contract").text
    else:
        system = load_prompt(
            "extract_agent" if agent_perspective(request, turns) else "extract_user"
        ).text
    system = fill(system, state, state.existing)
    raw = llm.complete_json(
        [ChatMessage("system", system), ChatMessage("user", render(state.context, turns))],
        reply_model=FactsReply,
        usage=usage,
    )
    parsed = parse_facts(raw, len(state.existing))
    return facts_from(parsed, state.existing, request, seqs_of(turns))


def procedural_facts(
    llm: LLM,
    request: AddRequest,
    turns: list[Turn],
    state: JobState,
    usage: TokenUsage | None = None,
) -> list[Fact]:
    system = fill(request.prompt or load_prompt("procedural").text, state, [])
    messages = [ChatMessage("system", system), ChatMessage("user", render([], turns))]
    raw = llm.complete_json(messages, reply_model=FactsReply, usage=usage)
    texts = [fact.text for fact in parse_facts(raw, 0).facts]
    if not texts:
        raise PermanentError(f"procedural summary was empty; raw reply: {raw[:2000]}")
    return [
        Fact(
            text="\n".join(texts),
            attributed_to="assistant",
            role="assistant",
            actor_id=request.actor_id,
            source_seqs=seqs_of(turns),
        )
    ]


def seqs_of(turns: Sequence[Turn]) -> tuple[int, ...]:
    """The request places of the messages given to the LLM as new: a fact extracted from a
    conversation is known to come from these, not from which one of them."""
    return tuple(turn.seq for turn in turns)


def fill(prompt: str, state: JobState, existing: list[ExistingMemory]) -> str:
    """Substitute the placeholders (plain replacement: prompts may contain JSON braces)."""
    observed = (state.request.timestamp or state.received_at).date().isoformat()
    listing = "\n".join(f"{i}. {m.text}" for i, m in enumerate(existing)) or "(none)"
    return prompt.replace("{observation_date}", observed).replace("{existing_memories}", listing)


def render(context: list[ContextMessage], turns: list[Turn]) -> str:
    earlier = "\n".join(f"{m.role}: {m.content}" for m in context)
    new = "\n".join(f"{t.role.value}{f' ({t.name})' if t.name else ''}: {t.text}" for t in turns)
    return (f"Earlier messages:\n{earlier}\n\n" if earlier else "") + f"New messages:\n{new}"


def facts_from(
    parsed: ParsedFacts,
    existing: list[ExistingMemory],
    request: AddRequest,
    source_seqs: tuple[int, ...] = (),
) -> list[Fact]:
    """Map the LLM's small integers (``related``, ``replaces``) back to real memory ids;
    unknown ones are logged, dropped. Every fact names ``source_seqs`` as its sources."""
    if parsed.unknown_ids:
        log.warning("LLM referred to unknown memory numbers %s; ignored", parsed.unknown_ids)
    return [
        Fact(
            text=fact.text,
            attributed_to="assistant" if fact.attributed_to == "assistant" else "user",
            related_ids=tuple(existing[i].id for i in fact.related),
            replaces_ids=tuple(existing[i].id for i in fact.replaces),
            role="assistant" if fact.attributed_to == "assistant" else "user",
            actor_id=request.actor_id,
            source_seqs=source_seqs,
        )
        for fact in parsed.facts
    ]
