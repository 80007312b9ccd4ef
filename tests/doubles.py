"""Test doubles that implement memq's protocols for real (no patching of memq's code)."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence

from pydantic import BaseModel

from pipeline.domain.protocols import ChatMessage, TokenUsage
from pipeline.errors import PermanentError, TransientError


class HashEmbedder:
    """Bag-of-words vectors: each word hashed into one of ``dims`` buckets, L2-normalised.
    Texts sharing words are similar, so retrieval and merging behave meaningfully."""

    def __init__(
        self, dims: int = 384, fail_on: Callable[[Sequence[str]], bool] | None = None
    ) -> None:
        self._dims = dims
        self.fail_on = fail_on
        self.calls: list[list[str]] = []

    @property
    def dims(self) -> int:
        return self._dims

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.fail_on is not None and self.fail_on(texts):
            raise TransientError(f"embedding refused for {len(texts)} text(s)")
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self._dims
        for word in re.findall(r"\w+", text.lower()) or ["<empty>"]:
            bucket = (
                int(hashlib.md5(word.encode(), usedforsecurity=False).hexdigest(), 16) % self._dims
            )
            vector[bucket] += 1.0
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector]


class ScriptedLLM:
    """Answers each ``complete_json`` call with the next scripted reply (or raises it)."""

    def __init__(self, *replies: str | Exception, default: str = '{"memory": []}') -> None:
        self.replies: list[str | Exception] = list(replies)
        self.default = default
        self.calls: list[list[ChatMessage]] = []
        self.images: list[str] = []
        self.reply_models: list[type[BaseModel] | None] = []

    def complete_json(
        self,
        messages: Sequence[ChatMessage],
        reply_model: type[BaseModel] | None = None,
        usage: TokenUsage | None = None,
    ) -> str:
        self.calls.append(list(messages))
        self.reply_models.append(reply_model)
        reply = self.replies.pop(0) if self.replies else self.default
        if isinstance(reply, Exception):
            raise reply
        if usage is not None:  # tokens as words, like tests.fakellm
            usage.add(sum(len(m.content.split()) for m in messages), len(reply.split()))
        return reply

    def describe_image(self, image_url: str, prompt: str, usage: TokenUsage | None = None) -> str:
        self.images.append(image_url)
        return f"a photo at {image_url.rsplit('/', 1)[-1]}"

    @property
    def system_prompts(self) -> list[str]:
        return [call[0].content for call in self.calls]


def refuse(reason: str) -> PermanentError:
    return PermanentError(reason)
