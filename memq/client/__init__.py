"""A small Python SDK for memq's own HTTP API (``/v1/...``; not the mem0 compatibility routes).

``Client`` is synchronous (over ``httpx.Client``), ``AsyncClient`` has the same methods as
coroutines (over ``httpx.AsyncClient``). Everything but sending is written once and shared:

- ``calls``: the requests (``Call``) and the functions that build the ones with options;
- ``operations``: every call of the API with the model its answer is read as;
- ``answers``: decoding a 2xx into ``memq.types``' models;
- ``errors``: ``MemqAPIError`` and its kinds, and ``error_from``, the one place httpx's
  exceptions and error bodies are translated;
- ``retries``: which failures a call is sent again after (``Repeat``), how often and after
  how long (``RetryPolicy``, ``Backoff``);
- ``connection``: the arguments and the ``MEMQ_CLIENT_*`` environment;
- ``paging``: listings walked page by page;
- ``sync`` and ``asynchronous``: the two clients, which only send, retry and sleep.

Every method returns a pydantic model of the answer (``memq.types``: ``Job``, ``Memory``,
``SearchHit``, ``MemoryPage``, ``Batch``...), or raises a ``MemqAPIError``:
``AuthenticationError`` (401, 403), ``NotFoundError`` (404), ``ValidationError`` (400, 413, 422),
``RateLimitError`` (429), ``UnavailableError`` (502, 503, 504, and transport failures:
connection refused, timeouts) or the base class for anything else. ``wait_for`` raises
``MemqTimeoutError``. No httpx exception ever escapes.

A 429, a 502/503/504 and a failed connection are retried (``max_retries``, 2 by default) with
exponential backoff and jitter, after the server's ``Retry-After`` when it sends one; a call
is sent again only where a second delivery cannot do a second thing (``Repeat``).

``Client()`` with no arguments reads ``MEMQ_CLIENT_URL`` (default ``http://127.0.0.1:8000``),
``MEMQ_CLIENT_API_KEY``, ``MEMQ_CLIENT_TIMEOUT_S`` and ``MEMQ_CLIENT_MAX_RETRIES``. The prefix
is the SDK's own: the server's settings ignore it, so a client key set on a machine that also
runs memq changes nothing for the server or its CLI.
"""

from __future__ import annotations

from memq.client.asynchronous import AsyncClient
from memq.client.calls import AddOptions, JobQuery, Validity
from memq.client.connection import (
    DEFAULT_BASE_URL,
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MAX_RETRIES,
    ENV_TIMEOUT_S,
)
from memq.client.errors import (
    AuthenticationError,
    MemqAPIError,
    MemqTimeoutError,
    NotFoundError,
    RateLimitError,
    UnavailableError,
    ValidationError,
    error_from,
    parse_retry_after,
)
from memq.client.paging import (
    AsyncJobPager,
    AsyncMemoryPager,
    AsyncPager,
    JobPager,
    MemoryPager,
    Pager,
)
from memq.client.retries import DEFAULT_MAX_RETRIES, Backoff, Repeat, RetryPolicy, worth_repeating
from memq.client.sync import Client
from memq.types import TERMINAL_STATUSES

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RETRIES",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MAX_RETRIES",
    "ENV_TIMEOUT_S",
    "TERMINAL_STATUSES",
    "AddOptions",
    "AsyncClient",
    "AsyncJobPager",
    "AsyncMemoryPager",
    "AsyncPager",
    "AuthenticationError",
    "Backoff",
    "Client",
    "JobPager",
    "JobQuery",
    "MemoryPager",
    "MemqAPIError",
    "MemqTimeoutError",
    "NotFoundError",
    "Pager",
    "RateLimitError",
    "Repeat",
    "RetryPolicy",
    "UnavailableError",
    "ValidationError",
    "Validity",
    "error_from",
    "parse_retry_after",
    "worth_repeating",
]
