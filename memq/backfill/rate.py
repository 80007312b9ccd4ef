"""The token bucket that paces a backfill's submissions."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` tokens per second, holding at most ``capacity`` (the burst allowed). ``acquire``
    waits for a token: a burst above the rate is delayed, never dropped. Rate 0: no limit."""

    def __init__(
        self,
        rate: float,
        capacity: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.capacity = capacity if capacity is not None else max(1.0, rate)
        self.tokens = self.capacity
        self.clock = clock
        self.sleep = sleep
        self.stamp = clock()

    def acquire(self) -> None:
        if self.rate <= 0:
            return
        while True:
            now = self.clock()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            self.sleep((1 - self.tokens) / self.rate)
