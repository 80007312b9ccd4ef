"""Where one search's time goes, on the scope ``search_latency.py --keep`` leaves (1k to 100k
memories of one user under the prefix ``memqbench-latency``).

Three views of the same questions (``search_latency``'s templates):
- the parts, each timed alone in this process: the query's embedding (the local MiniLM), the
  lemmatizer, the entity extractor, the time parser, and the searcher's every call to the store
  (each an Elasticsearch round trip, in the order it runs; the rest of a search is its own
  Python: fusion, hop, reply, newer-first);
- the whole search in this process (``Searcher.search``), and under the API over HTTP
  (``POST /v1/memories/search`` on a private API process on the same indices, with a key of the
  tenant ``bench``): the difference is the API's own cost (HTTP, authentication, limits,
  validation, serialization);
- with ``--pyinstrument FILE``, a statistical profile of the in-process searches (needs the
  pyinstrument package, a development tool, not a dependency of memq).

    .venv/bin/python ops/bench/search_latency.py --sizes 10000 --keep
    .venv/bin/python ops/bench/search_profile.py [--queries 50] [--pyinstrument FILE]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from api_stack import Stack
from search_latency import MEMQ_PREFIX, SCOPE, SEED, TOP_K, questions

from pipeline.config import Settings
from pipeline.nlp.timeexpr import periods
from pipeline.search import SearchQuery
from pipeline.services import Services

WARM_UP = 5
Timings = dict[str, list[float]]


class TimedStore:
    """The searcher's store with every call timed, by method and by what it is for."""

    def __init__(self, store: Any, timings: Timings) -> None:
        self._store = store
        self._timings = timings

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if not callable(method):
            return method

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                what = args[1] if name == "search_memories" and len(args) > 1 else ""
                key = f"store.{name}" + (f" ({what})" if what else "")
                self._timings[key].append((time.perf_counter() - started) * 1000)

        return timed


def timed_ms(call: Callable[..., object], *args: Any) -> float:
    """Milliseconds ``call(*args)`` took."""
    started = time.perf_counter()
    call(*args)
    return (time.perf_counter() - started) * 1000


def settings_for(prefix: str) -> Settings:
    base = Settings()
    return base.model_copy(
        update={
            "es": base.es.model_copy(update={"index_prefix": prefix}),
            "embedder": base.embedder.model_copy(update={"kind": "local"}),
        }
    )


def parts(services: Services, asked: list[str]) -> Timings:
    """Each part of a search timed alone, and every store call of whole searches."""
    searcher = services.searcher
    timings: Timings = defaultdict(list)
    now = searcher.clock()
    for query in asked:
        timings["embed the query"].append(timed_ms(searcher.embedder.embed, [query]))
        timings["lemmatize"].append(timed_ms(searcher.lemmatizer.lemmatize, query))
        timings["extract entities"].append(timed_ms(searcher.entities.extract, [query]))
        timings["time parser"].append(timed_ms(periods, query, now))
    timed = replace(searcher, store=TimedStore(searcher.store, timings))
    for query in asked:
        timings["search, in process"].append(timed_ms(timed.search, search_query(query)))
    return timings


def search_query(text: str) -> SearchQuery:
    return SearchQuery(query=text, scope=SCOPE, top_k=TOP_K)


def in_process(services: Services, asked: list[str]) -> list[float]:
    for query in asked[:WARM_UP]:
        services.searcher.search(search_query(query))
    return [timed_ms(services.searcher.search, search_query(q)) for q in asked]


def over_http(stack: Stack, asked: list[str]) -> list[float]:
    """``POST /v1/memories/search`` on one kept-alive connection."""
    headers = {"Authorization": f"Bearer {stack.key}"}
    with httpx.Client(base_url=stack.url, headers=headers, timeout=30) as http:

        def post(query: str) -> None:
            body = {"query": query, "user_id": SCOPE.user_id, "top_k": TOP_K}
            http.post("/v1/memories/search", json=body).raise_for_status()

        for query in asked[:WARM_UP]:
            post(query)
        return [timed_ms(post, q) for q in asked]


def report(timings: Timings) -> str:
    lines = ["| part | calls per search | p50 ms | p95 ms |", "|---|---|---|---|"]
    searches = len(timings["search, in process"])
    for name, values in timings.items():
        ordered = sorted(values)
        p50 = statistics.median(ordered)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        lines.append(f"| {name} | {len(values) / searches:.2f} | {p50:.1f} | {p95:.1f} |")
    return "\n".join(lines)


def profiled(services: Services, asked: list[str], path: Path) -> None:
    from pyinstrument import Profiler  # a development tool: imported only when asked for

    profiler = Profiler(interval=0.0005)
    with profiler:
        for query in asked:
            services.searcher.search(search_query(query))
    path.write_text(profiler.output_text(unicode=True, show_all=False))
    print(f"profile: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--port", type=int, default=18735)
    parser.add_argument("--pyinstrument", type=Path, default=None)
    args = parser.parse_args(argv)
    asked = questions(random.Random(SEED), args.queries)
    services = Services(settings_for(MEMQ_PREFIX))
    in_process(services, asked)  # warm: models loaded, connections open
    print(report(parts(services, asked)))
    with tempfile.TemporaryDirectory(prefix="search-profile-") as logs:
        stack = Stack(MEMQ_PREFIX, args.port, Path(logs), tenant=SCOPE.tenant)
        try:
            stack.start_api()
            rows = {"in process": in_process(services, asked), "HTTP": over_http(stack, asked)}
            rows["in process, again"] = in_process(services, asked)
        finally:
            stack.stop()
    for name, values in rows.items():
        print(f"{name}: p50 {statistics.median(values):.1f} ms, mean {statistics.mean(values):.1f}")
    if args.pyinstrument is not None:
        profiled(services, asked, args.pyinstrument)
    return 0


if __name__ == "__main__":
    sys.exit(main())
