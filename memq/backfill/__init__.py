"""``memq backfill``: import a transcript archive through the same intake as the API.

Two passes over the archive: ``scan`` keeps one small record per conversation (key, user, time,
position), sorted oldest first (so each user's sessions are accepted, hence run, in time order);
then each conversation is read back at its position and submitted with
``workers.intake.submit(..., backfill=True)`` under the idempotency key
``backfill:{format}:{key}``, so re-running an archive maps to the same jobs.

At most ``max_in_flight`` jobs are unfinished at any time (their records are polled), and
submissions pass a token bucket of ``rate`` jobs per second (a burst waits, nothing is dropped).
The checkpoint (JSON, replaced atomically) lists finished and failed keys: a run stopped by
SIGINT/SIGTERM (the current submission completes first) or killed resumes from it.
Exit status: 0 all succeeded, 1 some failed or died (listed), 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO

from memq.backfill.checkpoint import Checkpoint, write_atomically
from memq.backfill.options import BackfillOptions, Counts
from memq.backfill.progress import Progress
from memq.backfill.rate import TokenBucket
from memq.backfill.requests import requests_for
from pipeline.domain.jobs import TERMINAL_STATUSES, JobRecord, JobStatus
from pipeline.domain.models import AddRequest
from pipeline.ingestion.backfill.readers import Located, Reader
from pipeline.ingestion.capability import LLMNeed, missing_llm
from workers.app import MemqCelery
from workers.intake import replay, submit

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "Backfill",
    "BackfillOptions",
    "Checkpoint",
    "Counts",
    "Progress",
    "TokenBucket",
    "dry_run",
    "requests_for",
    "write_atomically",
]

FINISHED = TERMINAL_STATUSES
BACKFILL_EXTRACTION = LLMNeed(
    "to extract facts (--infer)", "infer", "or pass --no-infer to store the messages as they are"
)
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


# -- the driver ---------------------------------------------------------------------------------


@dataclass
class InFlight:
    """A submitted job not finished yet."""

    key: str
    idempotency_key: str
    request: AddRequest
    since: float


@dataclass
class Outcome:
    """What is known of one conversation's jobs so far."""

    parts: int
    settled: int = 0
    created: int = 0  # parts that became new jobs (or were replayed) in this run
    failures: list[dict[str, Any]] = field(default_factory=list)


class Backfill:
    """One run over one archive. ``run`` returns the exit status; counts are in ``counts``."""

    def __init__(
        self,
        app: MemqCelery,
        reader: Reader,
        options: BackfillOptions,
        err: TextIO = sys.stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.reader = reader
        self.options = options
        self.err = err
        self.clock = clock
        self.checkpoint = Checkpoint.load(options.checkpoint, options.fmt)
        self.bucket = TokenBucket(options.rate, clock=clock)
        self.progress = Progress(err, clock)
        self.counts = Counts()
        self.in_flight: dict[str, InFlight] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.stopping = False
        self.polled_at = 0.0

    def run(self) -> int:
        """Submit every conversation not finished yet, wait for them, report. See module doc.
        A run asking for extraction where no LLM is configured stops before it starts
        (``EXIT_BAD_INPUT``, the reason on ``err``): every job would fail."""
        refused = self._refusal()
        if refused is not None:
            self.err.write(f"backfill: {refused}\n")
            return EXIT_BAD_INPUT
        with stop_on_signals(self._stop):
            entries = self._plan()
            for entry in entries:
                if self.stopping:
                    break
                self._submit_conversation(entry)
            self._drain()
        self.checkpoint.save(self.clock(), force=True)
        self.progress.show(self.counts, len(self.in_flight), force=True)
        self.progress.end()
        return self._report()

    def _refusal(self) -> str | None:
        """Why this run cannot succeed here, or None. Its jobs are text conversations with
        ``infer`` from the options, so only extraction can need the LLM."""
        need = BACKFILL_EXTRACTION if self.options.infer else None
        refused = missing_llm(need, self.app.runtime.settings, "this backfill")
        return None if refused is None else refused.reason

    def _stop(self) -> None:
        self.stopping = True

    def _plan(self) -> list[Located]:
        """Scan, order oldest first (stable: archive order among equal times), drop the keys
        the checkpoint has finished (and failed ones, unless retrying them)."""
        entries = sorted(unique_keys(self.reader), key=lambda e: e.timestamp)
        for problem in self.reader.problems:
            self.checkpoint.skipped[problem.where] = problem.reason
        skip = set(self.checkpoint.done)
        if not self.options.retry_failed:
            skip |= set(self.checkpoint.failed)
        counts = self.counts
        counts.total = len(entries) + len(self.reader.problems)
        counts.skipped = len(self.reader.problems)
        counts.already_done = sum(1 for e in entries if e.key in self.checkpoint.done)
        counts.failed = sum(1 for e in entries if e.key in skip) - counts.already_done
        self.progress.base = counts.finished
        return [e for e in entries if e.key not in skip]

    def _submit_conversation(self, entry: Located) -> None:
        try:
            parts = requests_for(self.reader.load(entry.position), self.options)
        except ValueError as exc:
            self.checkpoint.skipped[entry.key] = str(exc).splitlines()[0]
            self.counts.skipped += 1
            return
        self.outcomes[entry.key] = Outcome(parts=len(parts))
        for idempotency_key, request in parts:
            self._wait_for_room()
            if self.stopping:
                return
            self.bucket.acquire()
            self._submit_part(entry.key, idempotency_key, request)

    def _submit_part(self, key: str, idempotency_key: str, request: AddRequest) -> None:
        accepted = submit(self.app, request, idempotency_key=idempotency_key, backfill=True)
        record, new = accepted.record, accepted.created
        if (
            not new
            and self.options.retry_failed
            and record.status in (JobStatus.FAILED, JobStatus.DEAD)
        ):
            record, new = replay(self.app, record.job_id), True
            self.counts.replayed += 1
        outcome = self.outcomes[key]
        if new:
            self.counts.submitted += outcome.created == 0
            outcome.created += 1
        self.in_flight[record.job_id] = InFlight(key, idempotency_key, request, self.clock())
        if record.status in FINISHED:
            self._settle(record.job_id, record)

    def _wait_for_room(self) -> None:
        """Poll (at most every ``poll_interval_s``) until fewer than ``max_in_flight`` jobs are
        unfinished, or a stop was asked."""
        if self.clock() - self.polled_at >= self.options.poll_interval_s:
            self._poll()
        while len(self.in_flight) >= self.options.max_in_flight and not self.stopping:
            time.sleep(self.options.poll_interval_s)
            self._poll()

    def _drain(self) -> None:
        while self.in_flight and not self.stopping:
            time.sleep(self.options.poll_interval_s)
            self._poll()

    def _poll(self) -> None:
        """Settle every in-flight job that finished (or timed out); resubmit one whose record
        is missing (accepted by a run that stopped between claiming and recording it)."""
        now = self.polled_at = self.clock()
        for job_id, record in fetch_records(self.app, list(self.in_flight)).items():
            flight = self.in_flight[job_id]
            if record is None:
                submit(self.app, flight.request, flight.idempotency_key, backfill=True)
            elif record.status in FINISHED:
                self._settle(job_id, record)
            elif now - flight.since > self.options.timeout_s:
                self._settle(job_id, record, f"not finished within {self.options.timeout_s:g}s")
        self.checkpoint.save(now)
        self.progress.show(self.counts, len(self.in_flight))

    def _settle(self, job_id: str, record: JobRecord, timed_out: str | None = None) -> None:
        key = self.in_flight.pop(job_id).key
        outcome = self.outcomes[key]
        outcome.settled += 1
        if timed_out or record.status != JobStatus.SUCCEEDED:
            reason = timed_out or record.reason or record.status
            outcome.failures.append({"job_id": job_id, "status": record.status, "reason": reason})
        if outcome.settled == outcome.parts:
            self._conclude(key, outcome)

    def _conclude(self, key: str, outcome: Outcome) -> None:
        self.checkpoint.failed.pop(key, None)
        if not outcome.failures:
            self.checkpoint.done.add(key)
            if outcome.created:
                self.counts.succeeded += 1
            else:
                self.counts.already_done += 1
            return
        self.checkpoint.failed[key] = {
            "status": outcome.failures[0]["status"],
            "reason": outcome.failures[0]["reason"],
            "jobs": outcome.failures,
        }
        if outcome.failures[0]["status"] == JobStatus.DEAD:
            self.counts.dead += 1
        else:
            self.counts.failed += 1

    def _report(self) -> int:
        c = self.counts
        self.err.write(
            f"backfill: {c.total} conversations: {c.submitted} submitted, {c.already_done} "
            f"already done, {c.succeeded} succeeded, {c.failed} failed, {c.dead} dead, "
            f"{c.skipped} skipped bad items, {c.replayed} replayed\n"
        )
        for where, reason in list(self.checkpoint.skipped.items())[:20]:
            self.err.write(f"  skipped {where}: {reason}\n")
        for key, failure in list(self.checkpoint.failed.items())[:50]:
            self.err.write(f"  {failure['status']} {key}: {failure['reason']}\n")
        if self.stopping:
            self.err.write("backfill: interrupted; run again with the same --checkpoint\n")
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.checkpoint.failed else EXIT_OK


def unique_keys(reader: Reader) -> list[Located]:
    """The scanned conversations; a key seen before is reported as a problem and dropped (it
    would map to the same job)."""
    seen: set[str] = set()
    entries: list[Located] = []
    for entry in reader.scan():
        if entry.key in seen:
            reader.report(entry.key, "duplicate key: an earlier conversation has the same id")
            continue
        seen.add(entry.key)
        entries.append(entry)
    return entries


def fetch_records(app: MemqCelery, job_ids: list[str]) -> dict[str, JobRecord | None]:
    """The current record of each job (None when there is none), one round trip."""
    return app.runtime.store.get_jobs(job_ids)


@contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGINT/SIGTERM ask the run to stop after the current submission (never in the middle of
    one); a second SIGINT interrupts at once."""
    stopped = [False]

    def handler(signum: int, frame: FrameType | None) -> None:
        if stopped[0] and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stopped[0] = True
        stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# -- dry run ------------------------------------------------------------------------------------


def dry_run(reader: Reader, out: TextIO) -> int:
    """Count conversations, messages and users without submitting anything."""
    conversations = messages = 0
    users: set[str] = set()
    first = last = None
    for entry in reader.scan():
        conversations += 1
        messages += entry.message_count
        users.add(entry.user_id)
        first = entry.timestamp if first is None else min(first, entry.timestamp)
        last = entry.timestamp if last is None else max(last, entry.timestamp)
    span = f", {first:%Y-%m-%d} .. {last:%Y-%m-%d}" if first and last else ""
    out.write(
        f"{reader.format}: {conversations} conversations, {messages} messages, "
        f"{len(users)} users{span}, {len(reader.problems)} bad items\n"
    )
    for problem in reader.problems[:20]:
        out.write(f"  skipped {problem.where}: {problem.reason}\n")
    return EXIT_OK
