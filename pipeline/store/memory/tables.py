"""The tables every part of ``InMemoryStore`` shares (one lock over all of them), and the
helpers that read them as Elasticsearch would."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pipeline.domain.jobs import JobRecord
from pipeline.domain.models import Scope
from pipeline.domain.validity import as_time


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def still_valid(source: dict[str, Any], at: datetime) -> bool:
    """Not yet replaced at ``at`` (as ``elastic.still_valid``)."""
    until = as_time(source.get("valid_until"))
    return until is None or until > at


def in_scope(source: dict[str, Any], scope: Scope) -> bool:
    return all(source.get(field) == value for field, value in scope.fields().items())


class Tables:
    """The documents by index, as Elasticsearch would hold them (``_source`` dicts), and the
    job records."""

    def __init__(self) -> None:
        self.memories: dict[str, dict[str, Any]] = {}
        self.history: dict[str, dict[str, Any]] = {}
        self.entities: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, JobRecord] = {}
        self.keys: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()
