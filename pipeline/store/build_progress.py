"""The progress of a reprocess, kept with its build: in each build index's mapping,
``_meta.reprocess.progress``, where any process reads it (``GET /v1/admin/reprocess``, the
explorer, ``memq reprocess --status``) without asking the process that runs it.

Glossary:
- **stage**: ``sync`` (a pass over the source, page by page), ``catch-up`` (writes paused,
  the builds brought level), ``switched`` (the aliases moved: done) or ``failed`` (stopped by
  an error, its ``reason`` said). A run killed outright records nothing more: its
  ``updated_at`` stops moving, and the lock that said it was active expires.
- **writer**: ``ProgressWriter``, any mode's (``reembed`` today): it keeps the numbers and
  hands them to a **sink** at each stage change and at most once every ``every_s`` between,
  so a run of many pages writes a mapping a few times a minute. ``MetaSink`` is the sink of
  the build indices.

A ``_meta`` put replaces the whole ``_meta``: the sink reads each build's once and writes it
back whole (its ``embedder``, ``mode`` and ``source`` kept), only ``progress`` changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from elasticsearch import Elasticsearch

from pipeline.domain.models import utcnow
from pipeline.errors import MemqError
from pipeline.store.client import es_errors

log = logging.getLogger("memq.reprocess")

PROGRESS_EVERY_S = 2.0


class Stage(StrEnum):
    SYNC = "sync"
    CATCH_UP = "catch-up"
    SWITCHED = "switched"
    FAILED = "failed"


@dataclass(frozen=True)
class BuildProgress:
    """Where a run is: ``done`` of ``total`` documents of ``kind`` at ``stage``; ISO times."""

    mode: str
    stage: Stage
    kind: str | None
    done: int
    total: int
    started_at: str
    updated_at: str
    reason: str | None = None

    def meta(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Stage) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> BuildProgress | None:
        """The progress a build's ``_meta.reprocess.progress`` holds; None when it has none
        (a build of an earlier release) or it is unreadable."""
        if not meta:
            return None
        try:
            return cls(**{**meta, "stage": Stage(meta["stage"])})
        except (TypeError, ValueError, KeyError):
            return None


Sink = Callable[[BuildProgress], None]


class ProgressWriter:
    """The progress of one run of ``mode``: ``stage`` at each stage change (written at once),
    ``advance`` after each page (written when ``every_s`` passed since the last write, or the
    kind changed), ``failed`` before an error is raised on. A sink that fails does not stop
    the run: the progress is a report, the build is the truth."""

    def __init__(
        self,
        sink: Sink,
        mode: str,
        *,
        every_s: float = PROGRESS_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.sink, self.every_s, self._clock, self._now = sink, every_s, clock, now
        started = now().isoformat()
        self.current = BuildProgress(mode, Stage.SYNC, None, 0, 0, started, started)
        self._written_at: float | None = None

    def stage(self, stage: Stage, kind: str | None = None, done: int = 0, total: int = 0) -> None:
        self._write(replace(self.current, stage=stage, kind=kind, done=done, total=total))

    def advance(self, kind: str, done: int, total: int) -> None:
        due = self._written_at is None or self._clock() - self._written_at >= self.every_s
        moved = replace(self.current, kind=kind, done=done, total=total)
        if due or kind != self.current.kind:
            self._write(moved)
        else:
            self.current = moved

    def failed(self, exc: BaseException) -> None:
        reason = exc.reason if isinstance(exc, MemqError) else f"{type(exc).__name__}: {exc}"
        self._write(replace(self.current, stage=Stage.FAILED, reason=reason or "stopped"))

    def _write(self, progress: BuildProgress) -> None:
        self.current = replace(progress, updated_at=self._now().isoformat())
        self._written_at = self._clock()
        try:
            self.sink(self.current)
        except MemqError as exc:
            log.warning("reprocess progress not recorded: %s", exc.reason)


class MetaSink:
    """Writes a progress into ``_meta.reprocess.progress`` of each of ``builds``."""

    def __init__(self, client: Elasticsearch, builds: Sequence[str]) -> None:
        self.client, self.builds = client, list(builds)
        self._metas: dict[str, dict[str, Any]] = {}

    def __call__(self, progress: BuildProgress) -> None:
        for index in self.builds:
            meta = self._meta(index)
            meta["reprocess"] = {**meta.get("reprocess", {}), "progress": progress.meta()}
            with es_errors(f"record the progress in {index}"):
                self.client.indices.put_mapping(index=index, meta=meta)

    def _meta(self, index: str) -> dict[str, Any]:
        if index not in self._metas:
            with es_errors(f"read the mapping of {index}"):
                body = self.client.indices.get_mapping(index=index).body
            self._metas[index] = dict(body[index]["mappings"].get("_meta", {}))
        return self._metas[index]
