"""Which adds can run where: ``pipeline.ingestion.capability``, the check every intake asks before
it accepts a conversation, over real ``Settings`` built from the environment."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pipeline.config import Settings
from pipeline.domain.models import AddRequest, MemoryType, Scope
from pipeline.errors import InvalidInputError
from pipeline.ingestion.capability import (
    EXTRACTION,
    PROCEDURAL,
    VISION,
    check_runnable,
    llm_need,
    missing_llm,
    refusal,
)
from workers.chat import runnable_here

IMAGE = {"type": "image_url", "image_url": {"url": "https://example.org/dog.jpg"}}
TEXT = {"type": "text", "text": "my dog"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("MEMQ_") or key == "OPENAI_API_KEY":
            monkeypatch.delenv(key)


def add(content: Any = "I moved to Lisbon", **fields: Any) -> AddRequest:
    scope = Scope(tenant="t", user_id="u", agent_id=fields.pop("agent_id", None))
    return AddRequest(scope=scope, messages=[{"role": "user", "content": content}], **fields)


def no_llm(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    """Settings with no LLM, the way compose leaves it: blank variables."""
    monkeypatch.setenv("OPENAI_API_KEY", "")
    monkeypatch.setenv("MEMQ_LLM_BASE_URL", "")
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    return Settings()


def with_llm(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    monkeypatch.setenv("MEMQ_LLM_BASE_URL", "http://127.0.0.1:11434/v1")
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    return Settings()


def test_an_infer_add_is_refused_saying_what_to_set_or_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused = refusal(add(), no_llm(monkeypatch))
    assert refused is not None and refused.field == "infer"
    assert refused.reason == (
        "this add needs an LLM to extract facts (infer=true), and none is configured: set "
        "OPENAI_API_KEY or MEMQ_LLM_BASE_URL, or send infer=false to store the messages as "
        "they are"
    )
    with pytest.raises(InvalidInputError, match="needs an LLM"):
        check_runnable(add(), no_llm(monkeypatch))


@pytest.mark.parametrize(
    ("request_fields", "need"),
    [
        ({}, EXTRACTION),
        ({"memory_type": MemoryType.EPISODIC}, EXTRACTION),
        ({"memory_type": MemoryType.PROCEDURAL, "agent_id": "a"}, PROCEDURAL),
        ({"memory_type": MemoryType.PROCEDURAL, "agent_id": "a", "infer": False}, PROCEDURAL),
        ({"infer": False}, None),
        ({"infer": False, "content": [TEXT, IMAGE]}, VISION),
    ],
)
def test_what_needs_the_llm(
    monkeypatch: pytest.MonkeyPatch, request_fields: dict[str, Any], need: Any
) -> None:
    fields = dict(request_fields)
    request = add(fields.pop("content", "hello"), **fields)
    assert llm_need(request, vision=True) is need
    refused = refusal(request, no_llm(monkeypatch, MEMQ_LLM_VISION="true"))
    assert (refused is None) == (need is None)
    if refused is not None and need is not None:
        assert refused.field == need.field and need.purpose in refused.reason
    assert refusal(request, with_llm(monkeypatch, MEMQ_LLM_VISION="true")) is None


def test_images_with_vision_off_need_no_llm_and_keep_the_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = add([TEXT, IMAGE], infer=False)
    assert llm_need(request, vision=False) is None
    assert refusal(request, no_llm(monkeypatch)) is None


def test_images_only_with_vision_off_would_store_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for settings in (with_llm(monkeypatch), no_llm(monkeypatch)):
        refused = refusal(add([IMAGE], infer=False), settings)
        assert refused is not None and refused.field == "messages"
        assert "images only" in refused.reason
    assert refusal(add([IMAGE]), with_llm(monkeypatch, MEMQ_LLM_VISION="true")) is None


def test_a_key_alone_is_an_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert refusal(add(), Settings()) is None


def test_missing_llm_words_another_subject_and_remedy(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = no_llm(monkeypatch)
    assert missing_llm(None, settings) is None
    assert missing_llm(EXTRACTION, with_llm(monkeypatch)) is None
    refused = missing_llm(EXTRACTION, no_llm(monkeypatch), "this import")
    assert refused is not None and refused.reason.startswith("this import needs an LLM")


def test_a_chat_conversation_is_stored_verbatim_where_there_is_no_llm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conversation = add("we meet on Friday", metadata={"conversation": "slack:C1"})
    stored = runnable_here(conversation, no_llm(monkeypatch))
    assert stored.infer is False
    assert stored.model_dump(exclude={"infer"}) == conversation.model_dump(exclude={"infer"})
    assert runnable_here(conversation, with_llm(monkeypatch)) is conversation
