"""A round trip of search: searches that do not wait on one another, sent in one msearch and
answered by the key each was added under; run now, or started in the background while the
caller goes on (``start``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pipeline.domain.models import Scope
from pipeline.store.protocol import SearchIndex, ServingStore

Key = tuple[int, str]  # (which query or item, which search of it)
Answers = dict[Key, dict[str, Any]]

_BACKGROUND_THREADS = 32  # round trips in flight at once per process; more wait their turn
_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}  # by process: a forked child makes its own


def _pool() -> ThreadPoolExecutor:
    with _lock:
        pid = os.getpid()
        if pid not in _pools:
            _pools.clear()  # a parent's pool: its threads did not come across the fork
            _pools[pid] = ThreadPoolExecutor(_BACKGROUND_THREADS, "memq-search-round")
        return _pools[pid]


@dataclass
class Round:
    """The searches of one round trip, each under its own key."""

    searches: list[tuple[Key, SearchIndex, Scope | None, dict[str, Any]]] = field(
        default_factory=list
    )

    def add(self, key: Key, index: SearchIndex, scope: Scope | None, body: dict[str, Any]) -> None:
        self.searches.append((key, index, scope, body))

    def run(self, store: ServingStore, what: str, named: bool = False) -> Answers:
        """Every search's full response by its key; no round trip when there is no search."""
        if not self.searches:
            return {}
        responses = store.search_indices(
            [(index, scope, body) for _, index, scope, body in self.searches], what, named
        )
        return {s[0]: r for s, r in zip(self.searches, responses, strict=True)}

    def start(self, store: ServingStore, what: str, named: bool = False) -> Callable[[], Answers]:
        """``run`` on a background thread (an I/O wait: the caller's work goes on beside it);
        the call returned waits for its answers, or raises what ``run`` raised."""
        if not self.searches:
            return dict
        return _pool().submit(self.run, store, what, named).result
