"""memq: a self-hosted memory layer for AI agents.

The HTTP SDK (``Client``, ``AsyncClient`` and their errors) is imported on first use, so
``import memq`` stays cheap for the command line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from memq.client import (
        AsyncClient,
        AuthenticationError,
        Client,
        MemqAPIError,
        MemqTimeoutError,
        NotFoundError,
        UnavailableError,
        ValidationError,
    )

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "MemqAPIError",
    "MemqTimeoutError",
    "NotFoundError",
    "UnavailableError",
    "ValidationError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """The SDK names, loaded from ``memq.client`` when first asked for."""
    if name in __all__ and name != "__version__":
        from memq import client

        return getattr(client, name)
    raise AttributeError(f"module 'memq' has no attribute {name!r}")
