"""One module per archive format; importing this package registers every reader."""

from __future__ import annotations

from pipeline.ingestion.backfill.formats import chatgpt, locomo, memq_jsonl, slack

__all__ = ["chatgpt", "locomo", "memq_jsonl", "slack"]
