"""How many LLM calls one process keeps in flight: at most ``ceiling``, and fewer once the
provider has said it holds fewer.

A 429 says more than "slow down": it was answered while a known number of this process's
calls were out, this one among them, so the provider holds fewer than that many. The limit
drops to one below the calls that were out (never below 1), and never rises on a refusal.
Each success raises it by 1/limit (about one more call per round of calls), up to
``ceiling``.

Why not halve on a 429, as TCP does: a provider that counts a call in flight until its
handler has finished, after the reply has reached the caller, now and then refuses a call sent
the moment another returned, at exactly its limit. Halving on that one refusal left a process
at 8 of 16 for the next ~90 calls (8 + 9 + ... + 15 successes to climb back); on 100
conversations of 100 users with a hosted-like model, cutting to the calls that were out
measured 1.08 to 1.22 times the throughput (docs/BENCHMARKS.md). It still finds a provider that
holds far fewer in one burst of refusals: a provider holding 8 refuses the calls beyond 8, and
each refusal, answered while fewer calls are out, brings the limit down to what it holds. The
refusals of a burst number about what was sent beyond the provider's limit, then one now and
then as the additive increase probes for more: no storm, even with ``Retry-After: 0``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class AdaptiveLimit:
    """A counting gate whose size adapts to the provider's answers. Thread-safe."""

    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError(f"a concurrency ceiling is at least 1, not {ceiling}")
        self.ceiling = ceiling
        self._limit = float(ceiling)
        self._in_flight = 0
        self._changed = threading.Condition()

    @property
    def limit(self) -> int:
        return max(1, int(self._limit))

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the calls in flight for the duration of the block."""
        with self._changed:
            while self._in_flight >= self.limit:
                self._changed.wait()
            self._in_flight += 1
        try:
            yield
        finally:
            with self._changed:
                self._in_flight -= 1
                self._changed.notify()

    def succeeded(self) -> None:
        """A call was answered: one more call per round of calls, up to the ceiling."""
        with self._changed:
            before = self.limit
            self._limit = min(float(self.ceiling), self._limit + 1.0 / self._limit)
            if self.limit > before:
                self._changed.notify()

    def throttled(self) -> None:
        """The provider refused a call for load (429), called while that call still holds its
        slot: the limit drops below the calls in flight, this one included."""
        with self._changed:
            self._limit = max(1.0, min(self._limit, float(self._in_flight - 1)))
