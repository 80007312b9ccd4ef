"""What a backfill run was asked to do, and what it came to."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MAX_MESSAGES_PER_JOB = 500  # AddRequest's bound: a longer conversation becomes several jobs
MAX_MESSAGE_CHARS = 100_000  # MessageIn's bound: a longer message is split in pieces


@dataclass(frozen=True)
class BackfillOptions:
    """What the command line chose. ``rate`` 0 means no rate limit; ``timeout_s`` bounds how
    long one job may stay unfinished before it is counted failed (a later run finds it done)."""

    fmt: str
    tenant: str = "default"
    infer: bool = False
    checkpoint: Path | None = None
    max_in_flight: int = 32
    rate: float = 5.0
    retry_failed: bool = False
    timeout_s: float = 900.0
    poll_interval_s: float = 0.2


@dataclass
class Counts:
    """Conversations, by outcome in this run."""

    total: int = 0
    submitted: int = 0
    already_done: int = 0
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    skipped: int = 0
    replayed: int = 0

    @property
    def finished(self) -> int:
        return self.already_done + self.succeeded + self.failed + self.dead + self.skipped
