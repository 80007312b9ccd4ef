"""Backfill: reading transcript archives (``readers``) for ``memq backfill``, which submits them
through the same intake as the API. Pure: nothing here imports Celery."""

from __future__ import annotations

from pipeline.ingestion.backfill import formats  # registers every format's reader
from pipeline.ingestion.backfill.readers import (
    READERS,
    Conversation,
    Located,
    Problem,
    Reader,
    ReaderOptions,
    reader_for,
    register,
)

__all__ = [
    "READERS",
    "Conversation",
    "Located",
    "Problem",
    "Reader",
    "ReaderOptions",
    "formats",
    "reader_for",
    "register",
]
