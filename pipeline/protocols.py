"""The seams of the pipeline. A test double is another implementation of these, never a patch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ChatMessage:
    """One message sent to the LLM. ``image_url`` is set for a vision request."""

    role: str
    content: str
    image_url: str | None = None


@runtime_checkable
class LLM(Protocol):
    """A chat model answering in JSON.

    ``complete_json`` returns the raw text of the reply (the caller parses and repairs it).
    Raises ``TransientError`` on timeouts, rate limits, 5xx and connection failures, and
    ``PermanentError`` when the request itself is refused (bad model name, bad key, 4xx).
    """

    def complete_json(self, messages: Sequence[ChatMessage]) -> str: ...

    def describe_image(self, image_url: str, prompt: str) -> str: ...


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
