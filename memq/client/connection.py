"""Where and how a client reaches the API: its arguments, else the SDK's own environment
variables. The prefix ``MEMQ_CLIENT_`` names no section of the server's settings (which
ignore unknown ``MEMQ_*`` names), so they never collide with ``MEMQ_API_*`` and the rest."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from memq.client.errors import MemqAPIError
from memq.client.retries import DEFAULT_MAX_RETRIES, Backoff, RetryPolicy

ENV_BASE_URL = "MEMQ_CLIENT_URL"
ENV_API_KEY = "MEMQ_CLIENT_API_KEY"
ENV_TIMEOUT_S = "MEMQ_CLIENT_TIMEOUT_S"
ENV_MAX_RETRIES = "MEMQ_CLIENT_MAX_RETRIES"
DEFAULT_BASE_URL = "http://127.0.0.1:8000"

N = TypeVar("N", int, float)


def headers_for(api_key: str) -> dict[str, str]:
    from memq import __version__

    return {"Authorization": f"Bearer {api_key}", "User-Agent": f"memq-python/{__version__}"}


@dataclass(frozen=True)
class Connection:
    """Where and how to reach the API, from the arguments or else the environment."""

    base_url: str
    api_key: str
    timeout_s: float
    retry: RetryPolicy


def connection_from(
    base_url: str | None,
    api_key: str | None,
    timeout_s: float | None,
    max_retries: int | None,
    backoff: Backoff | None,
) -> Connection:
    """Explicit arguments win; else ``MEMQ_CLIENT_URL``, ``MEMQ_CLIENT_API_KEY``,
    ``MEMQ_CLIENT_TIMEOUT_S`` and ``MEMQ_CLIENT_MAX_RETRIES``. No key anywhere, or a value
    out of range, is a ``MemqAPIError`` of type ``configuration`` (raised at construction, not
    at the first call)."""
    key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
    if not key:
        raise MemqAPIError(
            None, "configuration", f"no API key: pass api_key=... or set {ENV_API_KEY}"
        )
    if max_retries is None:
        max_retries = _from_env(ENV_MAX_RETRIES, DEFAULT_MAX_RETRIES, _count, "a count, 0 or more")
    if timeout_s is None:
        timeout_s = _from_env(ENV_TIMEOUT_S, 30.0, _positive, "seconds, a number > 0")
    return Connection(
        base_url=base_url or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL,
        api_key=key,
        timeout_s=timeout_s,
        retry=RetryPolicy(max_retries, backoff or Backoff()),
    )


def _from_env(name: str, default: N, parse: Callable[[str], N | None], expected: str) -> N:
    """The environment variable ``name`` read by ``parse`` (``None`` or ``ValueError`` when
    it is out of range or unreadable: a ``configuration`` error); ``default`` when unset."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None:
        raise MemqAPIError(None, "configuration", f"{name}={raw!r}: expected {expected}")
    return value


def _positive(raw: str) -> float | None:
    value = float(raw)
    return value if value > 0 else None


def _count(raw: str) -> int | None:
    value = int(raw)
    return value if value >= 0 else None
