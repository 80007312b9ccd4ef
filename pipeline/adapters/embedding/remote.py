"""Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, a llama.cpp server).

No retries here: a failed call raises ``TransientError`` and the task layer retries the phase.
"""

from __future__ import annotations

from collections.abc import Sequence

import openai
from pydantic import SecretStr

from pipeline.adapters.llm.openai_llm import openai_errors
from pipeline.config import EmbedderConfig
from pipeline.errors import PermanentError

_PLACEHOLDER_KEY = "memq-no-key"


class OpenAIEmbedder:
    def __init__(self, config: EmbedderConfig, api_key: SecretStr | None) -> None:
        self.config = config
        self._client = openai.OpenAI(
            api_key=api_key.get_secret_value() if api_key else _PLACEHOLDER_KEY,
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=0,
        )

    @property
    def dims(self) -> int:
        return self.config.dims

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.config.batch_size):
            vectors.extend(self._embed_batch(texts[start : start + self.config.batch_size]))
        return vectors

    def _embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        with openai_errors(f"embeddings {self.config.model}"):
            response = self._client.embeddings.create(model=self.config.model, input=list(texts))
        ordered = sorted(response.data, key=lambda item: item.index)
        if len(ordered) != len(texts) or any(len(i.embedding) != self.dims for i in ordered):
            raise PermanentError(
                f"embeddings {self.config.model}: expected {len(texts)} vectors of {self.dims} "
                "floats; set MEMQ_EMBEDDER_DIMS to the model's size"
            )
        return [list(item.embedding) for item in ordered]
