"""memq against a real model server: llama.cpp's (llama-cpp-python 0.3.36) on SmolLM2-135M,
started by the tests (tests/llamaserver.py). The adapter meets a server nobody scripted:

- that server refuses ``response_format`` of type ``json_schema`` with a 500 naming it (its
  request validation errors are 500s), so the adapter must take the JSON-mode fallback, once,
  and say so in its log, rather than retry a refusal until the job is dead;
- the token counts on the job are the server's own (its tokenizer agrees with them);
- a client timeout shorter than the model's answer fails the call, saying it timed out;
- a JSON reply cut off at ``MEMQ_LLM_MAX_TOKENS`` fails its job, saying so, and writes nothing.

The add path runs through the real stack: a worker of its own, on queues of its own, with
``MEMQ_LLM_BASE_URL`` pointing at the llama.cpp server. At temperature 0 the model's answers
are the same on every run; the tests check what memq does with them, never their quality.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from pipeline.adapters.llm.openai_llm import NO_BACKOFF, OpenAILLM
from pipeline.adapters.llm.parse import FactsReply
from pipeline.config import LLMConfig, QueueConfig, Settings
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Role, Scope
from pipeline.domain.protocols import ChatMessage, TokenUsage
from pipeline.domain.state import JobState
from pipeline.errors import PermanentError, RetriesExhaustedError
from pipeline.ingestion.phases.extract import Turn, inferred_facts
from pipeline.store.indices import IndexNames
from tests.conftest import running
from tests.integration.test_pipeline import memories_of, wait_job
from tests.llamaserver import MODEL_ALIAS, LlamaServer, local_model
from tests.processes import WorkerProcess, free_port
from workers.app import MemqCelery, create_celery
from workers.intake import submit

pytestmark = [pytest.mark.integration, pytest.mark.localllm]

SAID = "I'm vegetarian and I live in Lisbon."
# Long enough that the model's reply runs past MAX_TOKENS (its reply to SAID is 48 tokens).
RAMBLE = (
    "I'm Maria. I moved from Porto to Lisbon in March, I work as a nurse at Santa Maria hospital "
    "on night shifts, my sister Ana is a teacher in Braga, I have two cats called Miso and Tofu, "
    "I'm allergic to penicillin, I play the cello on Sundays with an amateur orchestra, and I'm "
    "training for the Lisbon half marathon in October."
)
MAX_TOKENS = 64
REPLY_TIMEOUT_S = 120.0  # a shared 2-core machine; an answer takes 2 to 20 s here
JOB_TIMEOUT_S = 300.0
REFUSED = "refused structured outputs"


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    server = LlamaServer(local_model(), tmp_path_factory.mktemp("llama") / "server.log")
    with running(server, server.wait_ready):
        yield server


def adapter(llama: LlamaServer, **config: Any) -> OpenAILLM:
    fields: dict[str, Any] = {"timeout_s": REPLY_TIMEOUT_S, "max_retries": 0, **config}
    return OpenAILLM(
        LLMConfig(base_url=llama.base_url, model=MODEL_ALIAS, **fields), None, NO_BACKOFF
    )


# The extraction prompt carries the conversation's date (the day it was received when it has
# none), and the small model's greedy reply changes with it: a fixed date keeps the replies these
# tests expect the same from one day to the next.
OBSERVED = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def said(text: str, user_id: str) -> AddRequest:
    message = MessageIn(role="user", content=text)
    scope = Scope(tenant="llama", user_id=user_id)
    return AddRequest(scope=scope, messages=[message], timestamp=OBSERVED)


def new_user() -> str:
    return f"user-{uuid.uuid4().hex[:10]}"


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if REFUSED in r.getMessage()]


def test_extraction_takes_the_json_mode_fallback_once_and_finds_facts(
    llama: LlamaServer, caplog: pytest.LogCaptureFixture
) -> None:
    state = JobState(
        job_id="llama-1", request=said(SAID, new_user()), received_at=datetime.now(UTC)
    )
    usage = TokenUsage()
    with adapter(llama) as llm, caplog.at_level(logging.WARNING, logger="memq.llm"):
        facts = inferred_facts(llm, state, [Turn(Role.USER, None, SAID)], usage)
        again = inferred_facts(llm, state, [Turn(Role.USER, None, SAID)], usage)

    assert llm.structured_outputs is False
    (warning,) = refusals(caplog)  # the second call went straight to JSON mode
    assert "HTTP 500" in warning and "json_schema" in warning, warning
    # JSON mode with the schema beside it: the server held the reply to it, both times (the
    # words may differ: the server reuses the first call's evaluated prompt for the second)
    for found in (facts, again):
        assert found and all(f.text.strip() and f.attributed_to == "user" for f in found), found
    assert usage.calls == 2  # the refused request answered no tokens, and counts no call


def test_token_usage_is_the_servers_own_count(llama: LlamaServer) -> None:
    messages = [
        ChatMessage("system", 'Answer with one JSON object: {"memory": [{"text": "<fact>"}]}'),
        ChatMessage("user", SAID),
    ]
    usage = TokenUsage()
    with adapter(llama) as llm:  # plain JSON mode: a reply held to a schema is not tokenized
        reply = llm.complete_json(messages, usage=usage)  # as its text would be

    assert usage.calls == 1
    # the chat template adds its role markers around the messages' own tokens
    assert usage.prompt_tokens > sum(llama.token_count(m.content) for m in messages)
    # re-tokenizing the reply may merge or split a token at the edges, no more
    assert abs(usage.completion_tokens - llama.token_count(reply)) <= 2, (usage, reply)


def test_a_client_timeout_fails_the_call_saying_it_timed_out(llama: LlamaServer) -> None:
    started = time.monotonic()
    with (
        adapter(llama, timeout_s=0.05, max_retries=1, max_tokens=16) as llm,
        pytest.raises(RetriesExhaustedError) as failed,
    ):
        llm.complete_json([ChatMessage("user", SAID)], reply_model=FactsReply)

    reason = failed.value.reason
    assert reason.startswith("LLM call failed after 2 attempt(s)"), reason
    assert "APITimeoutError" in reason and "timed out" in reason, reason
    assert time.monotonic() - started < 10  # the client's timeout, not the model's pace


def test_a_reply_cut_off_at_max_tokens_is_a_permanent_failure(llama: LlamaServer) -> None:
    with adapter(llama, max_tokens=8) as llm, pytest.raises(PermanentError) as failed:
        llm.complete_json([ChatMessage("user", RAMBLE)], reply_model=FactsReply)

    reason = failed.value.reason
    assert "cut off" in reason and "MEMQ_LLM_MAX_TOKENS=8" in reason, reason
    assert "before its JSON was complete: '" in reason, reason  # with what the model wrote


# -- through the stack: a worker whose LLM is the llama.cpp server -------------------------------


@pytest.fixture(scope="module")
def llama_worker(
    llama: LlamaServer,
    test_env: dict[str, str],
    settings: Settings,
    indices: IndexNames,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MemqCelery, WorkerProcess]]:
    """A worker with ``MEMQ_LLM_BASE_URL`` at the llama.cpp server, on queues of its own (the
    producer app beside it sends there), with time limits that fit a CPU model."""
    suffix = uuid.uuid4().hex[:8]
    queues = QueueConfig(
        io=f"llama-{suffix}.io", cpu=f"llama-{suffix}.cpu", backfill=f"llama-{suffix}.bf"
    )
    llm = LLMConfig(
        base_url=llama.base_url,
        model=MODEL_ALIAS,
        timeout_s=REPLY_TIMEOUT_S,
        max_retries=1,
        max_tokens=MAX_TOKENS,
    )
    env = {
        **test_env,
        "MEMQ_LLM_BASE_URL": llama.base_url,
        "MEMQ_LLM_MODEL": MODEL_ALIAS,
        "MEMQ_LLM_TIMEOUT_S": str(REPLY_TIMEOUT_S),
        "MEMQ_LLM_MAX_RETRIES": "1",
        "MEMQ_LLM_MAX_TOKENS": str(MAX_TOKENS),
        "MEMQ_QUEUES_IO": queues.io,
        "MEMQ_QUEUES_CPU": queues.cpu,
        "MEMQ_QUEUES_BACKFILL": queues.backfill,
        "MEMQ_WORKER_TASK_SOFT_TIME_LIMIT_S": "250",
        "MEMQ_WORKER_TASK_TIME_LIMIT_S": "280",
        "MEMQ_WORKER_VISIBILITY_TIMEOUT_S": "600",
        "MEMQ_WORKER_METRICS_PORT": str(free_port()),
    }
    app = create_celery(settings.model_copy(update={"llm": llm, "queues": queues}))
    worker = WorkerProcess(env, tmp_path_factory.mktemp("llama-worker") / "worker.log", 1)
    with running(worker, lambda: worker.wait_ready(app)):
        yield app, worker
    app.close()


def ended(app: MemqCelery, text: str) -> tuple[AddRequest, JobRecord]:
    """A new user's add of ``text``, submitted to the llama worker, and its job once ended."""
    request = said(text, new_user())
    return request, wait_job(app.runtime.store, submit(app, request).record.job_id, JOB_TIMEOUT_S)


def test_an_add_on_the_llama_server_succeeds_with_its_facts_and_tokens(
    llama_worker: tuple[MemqCelery, WorkerProcess], es: Elasticsearch, indices: IndexNames
) -> None:
    app, worker = llama_worker
    request, record = ended(app, SAID)

    assert record.status == JobStatus.SUCCEEDED, record.reason
    stored = memories_of(es, indices, request.scope)
    assert stored and {m["text"] for m in stored} == {r.text for r in record.results}, record
    assert record.counts["llm_calls"] == 1, record.counts
    assert record.counts["prompt_tokens"] > 0, record.counts
    assert 0 < record.counts["completion_tokens"] < MAX_TOKENS, record.counts
    assert REFUSED in worker.tail(400)  # the worker took the fallback, and said so


def test_a_reply_cut_off_fails_its_job_saying_so_and_writes_nothing(
    llama_worker: tuple[MemqCelery, WorkerProcess], es: Elasticsearch, indices: IndexNames
) -> None:
    request, record = ended(llama_worker[0], RAMBLE)

    assert record.status == JobStatus.FAILED, record
    assert record.phase == "extract", record
    assert record.reason is not None and "cut off" in record.reason, record.reason
    assert f"MEMQ_LLM_MAX_TOKENS={MAX_TOKENS}" in record.reason, record.reason
    assert record.results == [] and memories_of(es, indices, request.scope) == []
    for index in (indices.entities, indices.history):
        es.indices.refresh(index=index)
        mine = es.count(index=index, query={"term": {"user_id": request.scope.user_id}})
        assert mine["count"] == 0, index
