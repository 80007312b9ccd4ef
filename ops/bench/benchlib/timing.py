"""A store or a model with every call timed, for the benchmarks that split a search's time:
the searcher runs over it (``dataclasses.replace(searcher, store=Timed(...))``) and each call
is noted by method and, for the store's searches, by what they are for."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import orjson

Timings = dict[str, list[float]]
SEARCHES = {"search_memories", "search_indices"}  # the store's calls that name what they are for


class Timed:
    """``target`` with each method call timed in ms under ``{label}.{method}`` (and `` (what)``
    for a search), and their sum in ``spent_ms``. An msearch (``search_indices``) also notes
    the longest of its searches as Elasticsearch timed it (they run side by side) and the size
    of its answer as JSON, in KB (what the client parses); the time that takes is in
    ``own_ms``, for a caller timing a whole search to leave out."""

    def __init__(self, target: Any, label: str, timings: Timings | None = None) -> None:
        self._target = target
        self._label = label
        self.timings: Timings = defaultdict(list) if timings is None else timings
        self.spent_ms = 0.0
        self.own_ms = 0.0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)
        if not callable(method):
            return method

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            answer = None
            try:
                answer = method(*args, **kwargs)
                return answer
            finally:
                ms = (time.perf_counter() - started) * 1000
                self.spent_ms += ms
                what = args[1] if name in SEARCHES and len(args) > 1 else ""
                key = f"{self._label}.{name}" + (f" ({what})" if what else "")
                self.timings[key].append(ms)
                if name == "search_indices" and isinstance(answer, list):
                    self._responses(key, answer)
                    self.own_ms += (time.perf_counter() - started) * 1000 - ms

        return timed

    def _responses(self, key: str, responses: list[dict[str, Any]]) -> None:
        took = max((float(r.get("took", 0)) for r in responses), default=0.0)
        self.timings[f"{key}: slowest search, Elasticsearch's took"].append(took)
        size = sum(len(orjson.dumps(r)) for r in responses) / 1024
        self.timings[f"{key}: answer, KB of JSON"].append(size)
