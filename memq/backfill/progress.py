"""What a backfill run shows while it runs: a bar on a terminal, summary lines otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

from memq.backfill.options import Counts


class Progress:
    """On a terminal, a progress bar (tqdm: done / total, rate, ETA, failed and in flight),
    redrawn at most 4 times a second; otherwise one summary line every 5 s, for log files."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.clock = clock
        self.tty = stream.isatty()
        self.every_s = 0.25 if self.tty else 5.0
        self.started = clock()
        self.shown = 0.0
        self.base = 0  # conversations finished before this run started counting
        self.bar = (
            tqdm(file=stream, unit="conv", desc="backfill", dynamic_ncols=True)
            if self.tty
            else None
        )

    def show(self, counts: Counts, in_flight: int, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self.shown < self.every_s:
            return
        self.shown = now
        if self.bar is not None:
            self.bar.total, self.bar.initial, self.bar.n = counts.total, self.base, counts.finished
            failed = counts.failed + counts.dead
            self.bar.set_postfix_str(f"{failed} failed, {in_flight} in flight", refresh=False)
            self.bar.refresh()
            return
        self.stream.write(f"{self.line(counts, in_flight, now - self.started)}\n")
        self.stream.flush()

    def line(self, counts: Counts, in_flight: int, elapsed_s: float) -> str:
        done_now = counts.finished - self.base
        rate = done_now / elapsed_s if elapsed_s > 0 else 0.0
        left = counts.total - counts.finished
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        return (
            f"backfill: {counts.finished}/{counts.total} done, {counts.failed + counts.dead} "
            f"failed, {in_flight} in flight, {rate:.1f} conv/s, ETA {eta}"
        )

    def end(self) -> None:
        if self.bar is not None:
            self.bar.close()
