"""How many LLM calls one process keeps in flight: at most ``ceiling``, and fewer while the
provider says it is overloaded.

Additive increase, multiplicative decrease (the rule TCP uses for the same problem): each
success raises the limit by 1/limit (about one more call per round of calls), each 429 halves
it (at most once per second, so one burst of 429s counts once). A provider that allows 16
concurrent requests is thus held near 16 without a storm of refusals, and one that allows more
is never held below ``ceiling``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

CUT_INTERVAL_S = 1.0


class AdaptiveLimit:
    """A counting gate whose size adapts to the provider's answers. Thread-safe."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self._limit = float(ceiling)
        self._in_flight = 0
        self._last_cut = 0.0
        self._changed = threading.Condition()

    @property
    def limit(self) -> int:
        return max(1, int(self._limit))

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
        with self._changed:
            before = self.limit
            self._limit = min(float(self.ceiling), self._limit + 1.0 / self._limit)
            if self.limit > before:
                self._changed.notify()

    def throttled(self) -> None:
        """The provider refused a call for load (429): halve the limit."""
        with self._changed:
            now = time.monotonic()
            if now - self._last_cut >= CUT_INTERVAL_S:
                self._limit = max(1.0, self._limit / 2)
                self._last_cut = now
