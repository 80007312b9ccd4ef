"""The seams of the pipeline. A test double is another implementation of these, never a patch."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import BaseModel


@dataclass(frozen=True)
class ChatMessage:
    """One message sent to the LLM. ``image_url`` is set for a vision request."""

    role: str
    content: str
    image_url: str | None = None


@dataclass
class TokenUsage:
    """Tokens counted by the model server, summed over the calls that passed this object.

    One per job (or per phase run): the LLM adds each reply's ``usage`` to it. Safe to share
    between threads."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.calls += 1

    def counts(self) -> dict[str, int]:
        """As job counts: ``prompt_tokens``, ``completion_tokens``, ``llm_calls``."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "llm_calls": self.calls,
        }


@runtime_checkable
class LLM(Protocol):
    """A chat model answering in JSON.

    ``complete_json`` returns the raw text of the reply (the caller parses and repairs it).
    With ``reply_model`` the model is asked for JSON matching that pydantic model's schema
    (structured outputs) where the server supports it, else for any JSON object. Each call
    adds the tokens the server reports to ``usage`` when one is given.
    Raises ``TransientError`` on timeouts, rate limits, 5xx and connection failures, and
    ``PermanentError`` when the request itself is refused (bad model name, bad key, 4xx).
    """

    def complete_json(
        self,
        messages: Sequence[ChatMessage],
        reply_model: type[BaseModel] | None = None,
        usage: TokenUsage | None = None,
    ) -> str: ...

    def describe_image(
        self, image_url: str, prompt: str, usage: TokenUsage | None = None
    ) -> str: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised vectors of ``dims`` floats.

    ``embed`` takes a batch and returns one vector per text, in order. Raises
    ``TransientError`` for failures worth retrying and ``PermanentError`` otherwise.
    """

    @property
    def dims(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class Lemmatizer(Protocol):
    """Lower-cased, lemmatized text for BM25 (punctuation dropped, numbers kept)."""

    def lemmatize(self, text: str, language: str = "en") -> str: ...


@dataclass(frozen=True)
class Entity:
    """A named thing found in a text: ``text`` as written, ``type`` a coarse label."""

    text: str
    type: str


@runtime_checkable
class EntityExtractor(Protocol):
    """Finds the entities of many texts at once, one list per text, in order."""

    def extract(self, texts: Sequence[str]) -> list[list[Entity]]: ...
