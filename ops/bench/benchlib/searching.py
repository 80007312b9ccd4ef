"""Searches run in a thread while other work goes on, with their latencies."""

from __future__ import annotations

import threading
import time

from pipeline.domain.models import Scope
from pipeline.serving.search import Searcher
from pipeline.serving.search_models import SearchQuery

TENANT = "reprocess-bench"


class Searching:
    """One thread searching until stopped; its latencies (ms) and failures."""

    def __init__(self, searcher: Searcher, texts: list[str], users: int) -> None:
        self.searcher, self.texts, self.users = searcher, texts, users
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def scope(self, n: int) -> Scope:
        return Scope(tenant=TENANT, user_id=f"u{n % self.users}")

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            query = SearchQuery(query=self.texts[n % len(self.texts)], scope=self.scope(n))
            started = time.perf_counter()
            try:
                self.searcher.search(query)
                self.latencies.append((time.perf_counter() - started) * 1000)
            except Exception as exc:  # counted, the bench goes on
                self.failures.append(repr(exc))
            n += 1


def during(searching: Searching, work: threading.Thread | None, seconds: float) -> Searching:
    thread = threading.Thread(target=searching.run)
    thread.start()
    if work is None:
        time.sleep(seconds)
    else:
        work.start()
        work.join()
        time.sleep(1)
    searching.stop.set()
    thread.join()
    return searching
