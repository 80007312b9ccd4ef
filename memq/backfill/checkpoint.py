"""The checkpoint of a backfill run: finished and failed keys, replaced atomically."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.errors import InvalidInputError

CHECKPOINT_EVERY_S = 1.0


@dataclass
class Checkpoint:
    """Keys finished and failed (with job ids and reason) for one archive format; ``path`` None
    keeps it in memory only."""

    path: Path | None
    fmt: str
    done: set[str] = field(default_factory=set)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    saved_at: float = 0.0

    @classmethod
    def load(cls, path: Path | None, fmt: str) -> Checkpoint:
        """The checkpoint at ``path`` (empty when absent). InvalidInputError when it is not a
        checkpoint or was written for another format."""
        if path is None or not path.exists():
            return cls(path, fmt)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            stored_fmt, done, failed = data["format"], data["done"], data["failed"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInputError(f"{path}: not a backfill checkpoint ({exc})") from exc
        if stored_fmt != fmt:
            raise InvalidInputError(f"{path}: checkpoint of format {stored_fmt}, not {fmt}")
        return cls(path, fmt, set(done), dict(failed), dict(data.get("skipped", {})))

    def save(self, now: float, force: bool = False) -> None:
        """Write atomically (temp file + fsync + rename), at most once per second unless forced."""
        if self.path is None or (not force and now - self.saved_at < CHECKPOINT_EVERY_S):
            return
        payload = {
            "version": 1,
            "format": self.fmt,
            "updated_at": datetime.now(UTC).isoformat(),
            "done": sorted(self.done),
            "failed": self.failed,
            "skipped": self.skipped,
        }
        write_atomically(self.path, json.dumps(payload, indent=1, ensure_ascii=False))
        self.saved_at = now


def write_atomically(path: Path, text: str) -> None:
    """Readers of ``path`` see the old file or the new one, never a part of it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
