"""Can this add run here? Asked where a conversation is accepted, so that what cannot succeed
is refused at once with a reason (a 4xx from the API, a tool error from MCP, a message from
the CLI) instead of being accepted and failing later in extract.

An add needs the LLM when it asks for facts to be extracted (``infer=true``, the default), for
a procedural summary (``memory_type=procedural_memory``, whatever ``infer`` says), or for its
images to be described (image parts while ``MEMQ_LLM_VISION`` is on). An add whose messages
hold images only, with vision off, would store nothing and is refused as well.

The settings asked are those of the process that accepts the add; the workers run the same
configuration (``ops/up`` and compose give every process one environment).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config import Settings
from pipeline.domain.models import AddRequest, MemoryType
from pipeline.errors import InvalidInputError

SET_AN_LLM = "set OPENAI_API_KEY or MEMQ_LLM_BASE_URL"


@dataclass(frozen=True)
class LLMNeed:
    """What an add needs the LLM for (``purpose``), the request field that asks for it, and
    how to do without (``instead``)."""

    purpose: str
    field: str
    instead: str


EXTRACTION = LLMNeed(
    "to extract facts (infer=true)",
    "infer",
    "or send infer=false to store the messages as they are",
)
PROCEDURAL = LLMNeed(
    "to write its procedural summary (memory_type=procedural_memory)",
    "memory_type",
    "or leave memory_type out and send infer=false to store the messages as they are",
)
VISION = LLMNeed(
    "to describe its images (MEMQ_LLM_VISION is on)",
    "messages",
    "or send the text parts only",
)


def llm_need(request: AddRequest, vision: bool) -> LLMNeed | None:
    """Why ``request`` needs the LLM (the first reason of the phases' order), or None."""
    if request.memory_type is MemoryType.PROCEDURAL:
        return PROCEDURAL
    if request.extracts_facts():
        return EXTRACTION
    if vision and any(m.images() for m in request.messages):
        return VISION
    return None


def missing_llm(
    need: LLMNeed | None, settings: Settings, subject: str = "this add"
) -> InvalidInputError | None:
    """The refusal of ``subject``, which needs the LLM for ``need``, when ``settings``
    configure none (a blank key is none); None when nothing is needed or there is an LLM."""
    if need is None or settings.llm_configured():
        return None
    return InvalidInputError(
        f"{subject} needs an LLM {need.purpose}, and none is configured: {SET_AN_LLM}, "
        f"{need.instead}",
        field=need.field,
    )


def refusal(request: AddRequest, settings: Settings) -> InvalidInputError | None:
    """Why ``request`` cannot run under ``settings`` (as the error to raise), or None when it
    can."""
    refused = missing_llm(llm_need(request, settings.llm.vision), settings)
    if refused is not None:
        return refused
    if not settings.llm.vision and not any(m.text().strip() for m in request.messages):
        return InvalidInputError(
            "the messages hold images only, and images are not described (MEMQ_LLM_VISION is "
            "off), so nothing would be stored: send text with them, or turn vision on",
            field="messages",
        )
    return None


def check_runnable(request: AddRequest, settings: Settings) -> None:
    """Return when ``request`` can run under ``settings``; raise ``InvalidInputError`` saying
    what to set or send otherwise."""
    refused = refusal(request, settings)
    if refused is not None:
        raise refused
