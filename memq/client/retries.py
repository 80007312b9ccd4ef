"""When a failed call is sent again, decided once for both clients: which failures
(``Repeat``, ``worth_repeating``), how many times and after how long (``RetryPolicy``,
``Backoff``)."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Self

import httpx

from memq.client.errors import MemqAPIError, parse_retry_after

DEFAULT_MAX_RETRIES = 2

Outcome = httpx.Response | Exception
"""What one try of a call gave: the server's answer, or the exception httpx raised."""


class Repeat(Enum):
    """Which failures a call may be sent again after, by what a second delivery would do."""

    IDEMPOTENT = "idempotent"
    """A second delivery does what the first did: GET, PUT, DELETE, searches, and an add (the
    server makes the same conversation, or the same ``Idempotency-Key``, the same job).
    Retried after a 429, a 502/503/504, a connection that failed, and a timeout or a dropped
    connection after the request may have reached the server."""

    IF_REFUSED = "if_refused"
    """A second delivery could do the thing twice (a new key, a batch under a second id, a
    job's replay). Retried only when the server surely did nothing: a 429 (refused before any
    work) or a connection never made. Every POST not said otherwise."""

    NEVER = "never"
    """Never retried: the health probes report the moment."""


# The server refused the call before doing anything with it: safe to send again, any call.
_REFUSED_STATUSES = frozenset({429})
# The service could not answer now; a POST may have been partly done before it failed.
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
# Raised before a byte of the request left: the server cannot have seen it.
_NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Raised after the request may have arrived: the answer was lost, not necessarily the work.
_ANSWER_LOST_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def worth_repeating(outcome: Outcome, repeat: Repeat) -> bool:
    """Whether a call of kind ``repeat`` may be sent again after ``outcome``; how many times
    and when is ``RetryPolicy``'s business."""
    if repeat is Repeat.NEVER:
        return False
    if isinstance(outcome, httpx.Response):
        if outcome.status_code in _REFUSED_STATUSES:
            return True
        return repeat is Repeat.IDEMPOTENT and outcome.status_code in _UNAVAILABLE_STATUSES
    if isinstance(outcome, _NOT_SENT_ERRORS):
        return True
    return repeat is Repeat.IDEMPOTENT and isinstance(outcome, _ANSWER_LOST_ERRORS)


@dataclass(frozen=True)
class Backoff:
    """The waits between tries. Without ``Retry-After``, retry n (from 0) waits
    ``min(first_s * 2**n, max_s)`` times a random factor in [0.5, 1], so clients that failed
    together do not come back together. A ``Retry-After`` is waited as the server gave it when
    it is at most ``retry_after_max_s``; a longer one ends the retries at once (the error
    carries it in ``retry_after_s``, for the caller to decide)."""

    first_s: float = 0.5
    max_s: float = 8.0
    retry_after_max_s: float = 60.0

    def __post_init__(self) -> None:
        if min(self.first_s, self.max_s, self.retry_after_max_s) < 0:
            raise MemqAPIError(None, "configuration", f"{self}: waits cannot be negative")

    def wait_s(self, retries_done: int, jitter: float) -> float:
        """The wait before retry number ``retries_done`` (0 first), ``jitter`` in [0, 1]."""
        return min(self.first_s * 2.0 ** min(retries_done, 32), self.max_s) * (0.5 + jitter / 2)


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failed call is sent again, and after how long: the one decision the loops
    of ``Client`` and ``AsyncClient`` ask for. ``max_retries=0`` sends every call once."""

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff: Backoff = field(default_factory=Backoff)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise MemqAPIError(
                None, "configuration", f"max_retries={self.max_retries}: expected 0 or more"
            )

    def delay_s(
        self,
        outcome: Outcome,
        repeat: Repeat,
        retries_done: int,
        *,
        now: datetime | None = None,
        jitter: float | None = None,
    ) -> float | None:
        """Seconds to wait before sending the call again after ``outcome``, or ``None``: the
        outcome is final (a success, a failure not worth repeating, retries spent, or a
        ``Retry-After`` beyond the cap). ``now`` and ``jitter`` are drawn when not given."""
        if retries_done >= self.max_retries or not worth_repeating(outcome, repeat):
            return None
        retry_after_s = None
        if isinstance(outcome, httpx.Response):
            retry_after_s = parse_retry_after(outcome.headers.get("Retry-After"), now)
        if retry_after_s is None:
            return self.backoff.wait_s(retries_done, random.random() if jitter is None else jitter)
        return retry_after_s if retry_after_s <= self.backoff.retry_after_max_s else None


class Retrying:
    """What the two clients share besides their calls: their ``RetryPolicy``."""

    _retry: RetryPolicy

    @property
    def max_retries(self) -> int:
        """How many times a failed call is sent again (``Repeat`` says which failures)."""
        return self._retry.max_retries

    def with_options(
        self, *, max_retries: int | None = None, backoff: Backoff | None = None
    ) -> Self:
        """This client with other retry settings, for one call or one part of a program
        (``client.with_options(max_retries=0).search(...)``). The copy shares the connection
        pool, so it is cheap to make; closing either closes both."""
        clone = copy.copy(self)
        clone._retry = RetryPolicy(
            self._retry.max_retries if max_retries is None else max_retries,
            backoff or self._retry.backoff,
        )
        return clone
