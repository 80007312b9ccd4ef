"""Embedders behind the ``Embedder`` protocol, chosen by ``Settings.embedder.kind``."""

from __future__ import annotations

from pipeline.config import Settings
from pipeline.domain.protocols import Embedder


def make_embedder(settings: Settings) -> Embedder:
    """The configured embedder: the local MiniLM (offline default) or an OpenAI-compatible API."""
    config = settings.embedder
    if config.kind == "openai":
        from pipeline.adapters.embedding.remote import OpenAIEmbedder

        return OpenAIEmbedder(config, config.api_key or settings.llm_api_key())
    from pipeline.adapters.embedding.local import MiniLMEmbedder

    return MiniLMEmbedder(config)
