"""memq: a self-hosted memory layer for AI agents.

The HTTP SDK (``Client``, ``AsyncClient``, their errors and the answer models of
``memq.types``) is imported on first use, so ``import memq`` stays cheap for the command line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from memq.client import (
        AsyncClient,
        AuthenticationError,
        Backoff,
        Client,
        MemqAPIError,
        MemqTimeoutError,
        NotFoundError,
        RateLimitError,
        UnavailableError,
        ValidationError,
    )
    from memq.types import (
        Batch,
        BatchAccepted,
        HistoryEntry,
        Job,
        JobAccepted,
        Memory,
        MemoryPage,
        SearchHit,
        SearchHits,
    )

_TYPES = frozenset(
    {
        "Batch",
        "BatchAccepted",
        "HistoryEntry",
        "Job",
        "JobPage",
        "JobAccepted",
        "Memory",
        "MemoryPage",
        "SearchHit",
        "SearchHits",
    }
)

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "Backoff",
    "Batch",
    "BatchAccepted",
    "Client",
    "HistoryEntry",
    "Job",
    "JobAccepted",
    "JobPage",
    "Memory",
    "MemoryPage",
    "MemqAPIError",
    "MemqTimeoutError",
    "NotFoundError",
    "RateLimitError",
    "SearchHit",
    "SearchHits",
    "UnavailableError",
    "ValidationError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """The SDK names, loaded from ``memq.client`` / ``memq.types`` when first asked for."""
    if name in _TYPES:
        from memq import types

        return getattr(types, name)
    if name in __all__ and name != "__version__":
        from memq import client

        return getattr(client, name)
    raise AttributeError(f"module 'memq' has no attribute {name!r}")
