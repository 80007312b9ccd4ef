"""OpenAILLM against the scripted fake server, over real HTTP: the SDK, timeouts, retries and
error translation all run for real; only the model is fake."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from pipeline.adapters.llm.openai_llm import (
    DEFAULT_BACKOFF,
    NO_BACKOFF,
    LLMCall,
    OpenAILLM,
    json_mode_format,
    json_schema_format,
)
from pipeline.adapters.llm.parse import FactsReply, parse_json_object
from pipeline.config import LLMConfig
from pipeline.domain.protocols import LLM, ChatMessage, TokenUsage
from pipeline.errors import (
    ConfigurationError,
    PermanentError,
    RetriesExhaustedError,
    UnreachableError,
)
from tests.fakellm import Delay, Fail, FakeLLMServer, Garbage, fake_embedding, words

REPLY = '{"memory": [{"text": "The user likes tea", "attributed_to": "user"}]}'
MESSAGES = [ChatMessage("system", "extract facts"), ChatMessage("user", "I like tea")]

MakeLLM = Callable[..., OpenAILLM]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture
def make_llm(server: FakeLLMServer) -> Iterator[MakeLLM]:
    """Builds adapters aimed at ``server`` (zero backoff), closing them before it stops."""
    made: list[OpenAILLM] = []

    def make(**overrides: Any) -> OpenAILLM:
        fields = {"base_url": server.base_url, "model": "test-model", "timeout_s": 2.0}
        llm = OpenAILLM(LLMConfig(**{**fields, "max_retries": 2, **overrides}), None, NO_BACKOFF)
        made.append(llm)
        return llm

    yield make
    for llm in made:
        llm.close()


def test_success_returns_the_reply_text_and_sends_model_and_json_mode(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    server.script_chat(REPLY)
    llm = make_llm()
    assert isinstance(llm, LLM)

    assert llm.complete_json(MESSAGES) == REPLY

    (request,) = server.chat_requests()
    assert request["model"] == "test-model"
    assert request["response_format"] == {"type": "json_object"}
    assert request["temperature"] == 0
    assert request["messages"] == [
        {"role": "system", "content": "extract facts"},
        {"role": "user", "content": "I like tea"},
    ]


def test_fenced_reply_is_returned_raw_and_repaired_by_the_parser(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    fenced = f"Sure! Here you go:\n```json\n{REPLY}\n```"
    server.script_chat(fenced)

    raw = make_llm().complete_json(MESSAGES)

    assert raw == fenced
    assert parse_json_object(raw) == json.loads(REPLY)


@pytest.mark.parametrize(
    "failure",
    [Fail(500, "boom"), Fail(503, "overloaded"), Fail(429, "slow down"), Garbage(), ""],
    ids=["500", "503", "429", "garbage-200", "empty-reply"],
)
def test_a_transient_failure_is_retried_then_succeeds(
    server: FakeLLMServer, make_llm: MakeLLM, failure: Any
) -> None:
    server.script_chat(failure, REPLY)

    assert make_llm().complete_json(MESSAGES) == REPLY
    assert len(server.chat_requests()) == 2


def test_a_reply_slower_than_the_timeout_is_retried(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    # The server would sleep 5 s; the client gives up at 0.3 s and retries; stop() wakes it.
    server.script_chat(Delay(5.0, then="too late"), REPLY)

    assert make_llm(timeout_s=0.3).complete_json(MESSAGES) == REPLY
    assert len(server.chat_requests()) == 2


def test_exhausted_retries_name_the_attempts_and_the_last_error(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    server.script_chat(Fail(500, "first"), Fail(502, "second"), Fail(503, "third"))

    with pytest.raises(RetriesExhaustedError) as caught:
        make_llm(max_retries=2).complete_json(MESSAGES)

    assert "3 attempt(s)" in caught.value.reason
    assert "HTTP 503" in caught.value.reason and "third" in caught.value.reason
    assert "RetryError" not in caught.value.reason
    assert len(server.chat_requests()) == 3


def test_no_retries_configured_means_one_attempt(server: FakeLLMServer, make_llm: MakeLLM) -> None:
    server.script_chat(Fail(500, "boom"), REPLY)

    with pytest.raises(RetriesExhaustedError, match=r"1 attempt\(s\)"):
        make_llm(max_retries=0).complete_json(MESSAGES)
    assert len(server.chat_requests()) == 1


def test_an_unreachable_server_is_left_to_the_task_layer_at_once() -> None:
    with FakeLLMServer() as gone:
        base_url = gone.base_url
    config = LLMConfig(base_url=base_url, timeout_s=1.0, max_retries=3)

    with OpenAILLM(config, None, NO_BACKOFF) as llm, pytest.raises(UnreachableError) as caught:
        llm.complete_json(MESSAGES)

    assert "APIConnectionError" in caught.value.reason


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_refused_request_is_permanent_and_not_retried(
    server: FakeLLMServer, make_llm: MakeLLM, status: int
) -> None:
    server.script_chat(Fail(status, "model 'test-model' does not exist"), REPLY)

    with pytest.raises(PermanentError) as caught:
        make_llm().complete_json(MESSAGES)

    assert f"HTTP {status}" in caught.value.reason
    assert "model 'test-model' does not exist" in caught.value.reason
    assert len(server.chat_requests()) == 1


def test_describe_image_sends_a_text_part_and_an_image_part(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    server.script_chat("A red bicycle leaning on a wall.")

    text = make_llm().describe_image("https://example.com/bike.png", "Describe this image.")

    assert text == "A red bicycle leaning on a wall."
    (request,) = server.chat_requests()
    assert "response_format" not in request
    assert request["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe this image."},
                {"type": "image_url", "image_url": {"url": "https://example.com/bike.png"}},
            ],
        }
    ]


def test_each_retry_is_logged(
    server: FakeLLMServer, make_llm: MakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    server.script_chat(Fail(500, "boom"), Fail(429, "later"), REPLY)

    with caplog.at_level(logging.WARNING, logger="memq.llm"):
        make_llm().complete_json(MESSAGES)

    retries = [r for r in caplog.records if r.name == "memq.llm"]
    assert len(retries) == 2
    assert "HTTP 500" in retries[0].getMessage() and "HTTP 429" in retries[1].getMessage()


def test_a_key_or_a_base_url_is_required() -> None:
    with pytest.raises(ConfigurationError, match="MEMQ_LLM_API_KEY"):
        OpenAILLM(LLMConfig(), None)
    OpenAILLM(LLMConfig(), SecretStr("sk-test")).close()


def test_default_backoff_is_jittered_exponential_capped_at_8s() -> None:
    wait = DEFAULT_BACKOFF.wait()
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (4, 4.0), (5, 8.0), (12, 8.0)]:
        samples = [wait(SimpleNamespace(attempt_number=attempt)) for _ in range(50)]  # type: ignore[arg-type]
        assert all(0.0 <= s <= ceiling for s in samples)
        assert len(set(samples)) > 1  # jitter: not a fixed schedule


def test_fake_embeddings_are_deterministic_unit_vectors(server: FakeLLMServer) -> None:
    body = {"model": "e", "input": ["alpha", "beta"]}
    data = httpx.post(f"{server.base_url}/embeddings", json=body).json()["data"]

    vectors = [item["embedding"] for item in data]
    assert vectors[0] == fake_embedding("alpha", 384) and vectors[0] != vectors[1]
    assert all(len(v) == 384 and abs(sum(x * x for x in v) - 1.0) < 1e-9 for v in vectors)


def test_fake_is_scriptable_over_http(server: FakeLLMServer, make_llm: MakeLLM) -> None:
    steps = [{"fail": 500, "message": "boom"}, {"reply": REPLY}]
    httpx.post(f"{server.base_url[:-3]}/_script", json={"chat": steps, "default": "{}"})

    llm = make_llm()
    assert llm.complete_json(MESSAGES) == REPLY
    assert llm.complete_json(MESSAGES) == "{}"

    recorded = httpx.get(f"{server.base_url[:-3]}/_requests").json()["requests"]
    assert [r["path"] for r in recorded] == ["/v1/chat/completions"] * 3
    httpx.post(f"{server.base_url[:-3]}/_reset", json={})
    assert server.requests == []


def test_fake_runs_as_a_process_serving_a_replies_file(tmp_path: Path) -> None:
    replies = tmp_path / "replies.jsonl"
    replies.write_text(f"{REPLY}\n")
    command = [sys.executable, "-m", "tests.fakellm", "--port", "0", "--replies-file", str(replies)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            base_url = process.stdout.readline().strip().removeprefix("FAKELLM_URL=")
            with OpenAILLM(LLMConfig(base_url=base_url, timeout_s=5.0), None) as llm:
                assert llm.complete_json(MESSAGES) == REPLY
                assert llm.complete_json(MESSAGES) == '{"memory": []}'
        finally:
            process.terminate()
    assert process.returncode == 0


# -- structured outputs and token usage ------------------------------------------------------


def test_a_reply_model_asks_for_its_json_schema(server: FakeLLMServer, make_llm: MakeLLM) -> None:
    server.script_chat(REPLY)
    llm = make_llm()

    assert llm.complete_json(MESSAGES, reply_model=FactsReply) == REPLY

    (request,) = server.chat_requests()
    response_format = request["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "FactsReply"
    assert response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["schema"] == FactsReply.model_json_schema()
    assert llm.structured_outputs is True


def test_the_schema_is_strict_compatible() -> None:
    """OpenAI's strict mode: every object forbids extra keys and requires all its fields."""
    schema = json_schema_format(FactsReply)["json_schema"]["schema"]
    objects = [schema, *schema["$defs"].values()]
    for node in objects:
        assert node["additionalProperties"] is False
        assert set(node["required"]) == set(node["properties"])


def test_a_server_refusing_json_schema_falls_back_to_json_mode_once(
    server: FakeLLMServer, make_llm: MakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    server.refuse_json_schema()
    server.script_chat(REPLY, '{"memory": []}', '{"memory": []}')
    llm = make_llm()

    with caplog.at_level(logging.WARNING, logger="memq.llm"):
        first = llm.complete_json(MESSAGES, reply_model=FactsReply)
        later = [llm.complete_json(MESSAGES, reply_model=FactsReply) for _ in range(2)]

    assert (first, later) == (REPLY, ['{"memory": []}'] * 2)
    assert len(server.refused_requests()) == 1  # asked once, remembered afterwards
    served = server.chat_requests()
    # JSON mode, with the schema beside it for servers that constrain to it (llama.cpp's)
    assert [r["response_format"] for r in served] == [json_mode_format(FactsReply)] * 3
    assert json_mode_format(FactsReply)["type"] == "json_object"
    assert llm.structured_outputs is False and llm.schema_in_json_mode is True
    warnings = [r.getMessage() for r in caplog.records if r.name == "memq.llm"]
    assert len(warnings) == 1 and "structured outputs" in warnings[0]


def test_a_server_refusing_the_schema_in_json_mode_falls_back_to_plain_json_mode_once(
    server: FakeLLMServer, make_llm: MakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    server.script_chat(
        Fail(400, "response_format: type json_schema is not supported"),
        Fail(400, "response_format.schema: extra inputs are not permitted"),
        REPLY,
        REPLY,
    )
    llm = make_llm()

    with caplog.at_level(logging.WARNING, logger="memq.llm"):
        replies = [llm.complete_json(MESSAGES, reply_model=FactsReply) for _ in range(2)]

    assert replies == [REPLY, REPLY]
    formats = [r["response_format"] for r in server.chat_requests()]
    assert [f["type"] for f in formats] == ["json_schema", *["json_object"] * 3]
    assert "schema" in formats[1] and formats[2:] == [{"type": "json_object"}] * 2
    assert llm.structured_outputs is False and llm.schema_in_json_mode is False
    warnings = [r.getMessage() for r in caplog.records if r.name == "memq.llm"]
    assert len(warnings) == 2 and "schema in JSON mode" in warnings[1], warnings


def test_another_client_error_is_not_taken_for_a_refusal(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    server.script_chat(Fail(400, "context length exceeded"), REPLY)
    llm = make_llm()

    with pytest.raises(PermanentError, match="context length exceeded"):
        llm.complete_json(MESSAGES, reply_model=FactsReply)

    assert len(server.chat_requests()) == 1
    assert llm.structured_outputs is None  # still unknown: json_schema is asked next time


# llama-cpp-python's server answers its request validation errors with 500 (tests/llamaserver.py)
LLAMA_CPP_REFUSAL = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
)


def test_a_500_refusing_json_schema_falls_back_at_once_without_retries(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    server.script_chat(Fail(500, LLAMA_CPP_REFUSAL), REPLY)
    llm = make_llm(max_retries=2)

    assert llm.complete_json(MESSAGES, reply_model=FactsReply) == REPLY

    formats = [r["response_format"]["type"] for r in server.chat_requests()]
    assert formats == ["json_schema", "json_object"]  # the refusal was not retried
    assert llm.structured_outputs is False


def test_another_500_is_retried_and_not_taken_for_a_refusal(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    server.script_chat(Fail(500, "json_schema compiler crashed"), REPLY)
    llm = make_llm(max_retries=2)

    assert llm.complete_json(MESSAGES, reply_model=FactsReply) == REPLY

    formats = [r["response_format"]["type"] for r in server.chat_requests()]
    assert formats == ["json_schema", "json_schema"]
    assert llm.structured_outputs is True


def test_max_tokens_is_sent_and_a_json_reply_cut_off_there_is_permanent(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    server.script_chat(REPLY)
    llm = make_llm(max_tokens=3)
    usage = TokenUsage()

    with pytest.raises(PermanentError, match=r"cut off .*MEMQ_LLM_MAX_TOKENS=3") as failed:
        llm.complete_json(MESSAGES, reply_model=FactsReply, usage=usage)

    (request,) = server.chat_requests()  # not retried: the model would write the same
    assert request["max_tokens"] == 3
    assert repr(" ".join(REPLY.split()[:3])) in failed.value.reason  # what it wrote
    assert usage.completion_tokens == 3  # the tokens were spent all the same


def test_without_max_tokens_none_is_sent_and_a_whole_reply_passes(
    server: FakeLLMServer, make_llm: MakeLLM
) -> None:
    server.script_chat(REPLY)

    assert make_llm().complete_json(MESSAGES, reply_model=FactsReply) == REPLY
    (request,) = server.chat_requests()
    assert "max_tokens" not in request


def test_a_description_cut_off_is_still_an_answer(server: FakeLLMServer, make_llm: MakeLLM) -> None:
    server.script_chat("a red bicycle leaning on a wall")

    description = make_llm(max_tokens=2).describe_image("data:image/png;base64,AAAA", "what?")
    assert description == "a red"


def test_token_usage_is_added_up_and_observed(server: FakeLLMServer) -> None:
    server.script_chat(REPLY, Fail(500, "boom"), REPLY)
    calls: list[LLMCall] = []
    config = LLMConfig(base_url=server.base_url, model="m", timeout_s=2.0, max_retries=1)
    usage = TokenUsage()

    with OpenAILLM(config, None, NO_BACKOFF, observer=calls.append) as llm:
        llm.complete_json(MESSAGES, usage=usage)
        llm.complete_json(MESSAGES, reply_model=FactsReply, usage=usage)

    # the fake's tokens are words: those of the wire messages, and those of the reply
    prompt = words([{"role": m.role, "content": m.content} for m in MESSAGES])
    completion = words(REPLY)
    assert prompt > 0 and completion > 0
    assert (usage.prompt_tokens, usage.completion_tokens) == (2 * prompt, 2 * completion)
    assert usage.calls == 2
    assert [c.outcome for c in calls] == ["ok", "error", "ok"]
    tokens = [(c.prompt_tokens, c.completion_tokens) for c in calls]
    assert tokens == [(prompt, completion), (0, 0), (prompt, completion)]
    assert all(c.seconds > 0 for c in calls)
