"""Where one search's time goes, on the scope ``search_latency.py --keep`` leaves (1k to 100k
memories of one user under the prefix ``memqbench-latency``).

Views of the same questions (``search_latency``'s templates):
- the parts, each timed alone in this process: the query's embedding (the local MiniLM), the
  lemmatizer, the entity extractor, the time parser, and the searcher's every call to the store
  (each one Elasticsearch round trip; the rest of a search is its own Python: fusion,
  feedback, hop, reply, newer-first);
- the whole search, interleaved per question (the order rotated) with the floor (embed in
  process, one bare kNN request): in this process (``Searcher.search``), and through the API
  over HTTP (``POST /v1/memories/search`` to a private API process on the same indices, with
  a key of the tenant ``bench``), whose difference is the API's own cost (HTTP,
  authentication, limits, validation, serialization). With ``--baseline DIR`` (another memq
  checkout, e.g. a ``git worktree`` of an earlier commit) a second API process runs DIR's
  code, timed in the same rotation: a before/after on one noisy machine; with
  ``--old-search FILE`` (an earlier ``pipeline/serving/search.py`` whose imports this checkout still
  satisfies) its searcher runs in this process too, and the two rankings are compared;
- with ``--pyinstrument FILE``, a statistical profile of the in-process searches (needs the
  pyinstrument package, a development tool, not a dependency of memq).

Run it from a directory that holds no memq checkout (each API process imports the code its
``PYTHONPATH`` names), this checkout first on the path:

    .venv/bin/python ops/bench/search_latency.py --sizes 10000 --keep
    cd /tmp && PYTHONPATH=$REPO:$REPO/ops/bench $REPO/.venv/bin/python \
        $REPO/ops/bench/search_profile.py [--queries 50] [--baseline DIR] [--old-search FILE]
        [--pyinstrument FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from benchlib.search import (
    MEMQ_PREFIX,
    SCOPE,
    SEED,
    TOP_K,
    floor_search,
    local_minilm,
    questions,
    search_query,
    settings_for,
)
from benchlib.stack import Stack
from benchlib.stats import percentile
from benchlib.timing import Timed, Timings

from pipeline.adapters.nlp.timeexpr import periods
from pipeline.services import Services
from pipeline.serving.search import Searcher

WARM_UP = 5
ROOT = Path(__file__).resolve().parents[2]


def timed_ms(call: Callable[..., object], *args: Any) -> float:
    """Milliseconds ``call(*args)`` took."""
    started = time.perf_counter()
    call(*args)
    return (time.perf_counter() - started) * 1000


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
    store = Timed(searcher.store, "store", timings)
    timed = replace(searcher, store=store)
    for query in asked:
        own = store.own_ms  # the answers' sizes, measured meanwhile, left out
        ms = timed_ms(timed.search, search_query(query)) - (store.own_ms - own)
        timings["search, in process"].append(ms)
    return timings


Search = Callable[[str], object]


def in_process(services: Services) -> Search:
    return partial(searched, services.searcher)


def searched(searcher: Searcher, query: str) -> object:
    return searcher.search(search_query(query))


def old_searcher(path: Path, searcher: Searcher) -> Searcher:
    """The ``Searcher`` of another version of ``pipeline/serving/search.py`` (one whose imports this
    checkout still satisfies), over the same store and models."""
    spec = importlib.util.spec_from_file_location("old_search", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_search"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    fields = {f.name: getattr(searcher, f.name) for f in dataclasses.fields(searcher)}
    old: Searcher = module.Searcher(**fields)
    return old


def same_ranking(a: Searcher, b: Searcher, asked: list[str]) -> int:
    """How many of ``asked`` the two searchers answer with the same ids in the same order."""
    ids = [[[h.id for h in s.search(search_query(q))] for s in (a, b)] for q in asked]
    return sum(x == y for x, y in ids)


Answers = Callable[[str], list[tuple[str, float]]]


def same_over_http(a: Answers, b: Answers, asked: list[str]) -> tuple[int, int]:
    """Of ``asked``, how many two APIs answer with the same ids in the same order, and how
    many of those with the same scores too."""
    answers = [(a(q), b(q)) for q in asked]
    ids = [x for x, y in answers if [i for i, _ in x] == [i for i, _ in y]]
    return len(ids), sum(x == y for x, y in answers)


def floor(services: Services) -> Search:
    """search_latency's floor: embed in process, then one bare kNN request."""
    embedder = local_minilm(services.searcher.embedder)
    return floor_search(services.store.client, embedder, services.store.names.memories)


@contextmanager
def over_http(code: Path, port: int, logs: Path) -> Iterator[Answers]:
    """``POST /v1/memories/search`` to an API process running the memq checkout ``code``
    (on the kept indices, with a key of their tenant), on one kept-alive connection."""
    stack = Stack(MEMQ_PREFIX, port, logs, tenant=SCOPE.tenant, settings={"PYTHONPATH": str(code)})
    try:
        stack.start_api()
        headers = {"Authorization": f"Bearer {stack.key}"}
        with httpx.Client(base_url=stack.url, headers=headers, timeout=30) as http:

            def post(query: str) -> list[tuple[str, float]]:
                body = {"query": query, "user_id": SCOPE.user_id, "top_k": TOP_K}
                answer = http.post("/v1/memories/search", json=body)
                answer.raise_for_status()
                return [(hit["id"], hit["score"]) for hit in answer.json()["results"]]

            yield post
    finally:
        stack.stop()


def interleaved(searches: dict[str, Search], asked: list[str]) -> Timings:
    """Each question asked of every system, in a rotating order, after a warm-up."""
    for search in searches.values():
        for query in asked[:WARM_UP]:
            search(query)
    timings: Timings = defaultdict(list)
    names = list(searches)
    for i, query in enumerate(asked):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            timings[name].append(timed_ms(searches[name], query))
    return timings


def compared(timings: Timings) -> str:
    lines = ["| system | p50 ms | p95 ms | p50 / floor p50 |", "|---|---|---|---|"]
    base = statistics.median(timings["floor"])
    for name, values in timings.items():
        p50, p95 = percentile(values, 50), percentile(values, 95)
        lines.append(f"| {name} | {p50:.1f} | {p95:.1f} | {p50 / base:.2f} |")
    return "\n".join(lines)


def report(timings: Timings) -> str:
    lines = ["| part (ms, but sizes in KB) | calls per search | p50 | p95 |", "|---|---|---|---|"]
    searches = len(timings["search, in process"])
    for name, values in timings.items():
        ordered = sorted(values)  # a rare call may be made once: no interpolation
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
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another memq checkout: its API is timed beside this one's, interleaved",
    )
    parser.add_argument(
        "--without-newer-first",
        action="store_true",
        help="also time each in-process searcher with the newer-first rule off",
    )
    parser.add_argument(
        "--old-search",
        type=Path,
        default=None,
        help="another version of pipeline/serving/search.py, timed in process beside this one's",
    )
    args = parser.parse_args(argv)
    asked = questions(random.Random(SEED), args.queries)
    services = Services(settings_for(MEMQ_PREFIX))
    interleaved({"warm": in_process(services)}, asked)  # models loaded, connections open
    print(report(parts(services, asked)))
    codes = {"memq over HTTP": ROOT}
    if args.baseline is not None:
        codes[f"memq over HTTP, {args.baseline}"] = args.baseline.resolve()
    with tempfile.TemporaryDirectory(prefix="search-profile-") as logs, ExitStack() as apis:
        searches: dict[str, Search] = {"floor": floor(services)}
        searchers = {"memq in process": services.searcher}
        if args.old_search is not None:
            old = old_searcher(args.old_search, services.searcher)
            same = same_ranking(old, services.searcher, asked)
            print(f"same ranking as {args.old_search}: {same} of {len(asked)} questions")
            searchers[f"memq in process, {args.old_search}"] = old
        if args.without_newer_first:  # each searcher again, the rule off as its setting does
            for name, searcher in list(searchers.items()):
                config = searcher.config.model_copy(update={"rival_score_ratio": 1.0})
                searchers[f"{name}, no newer-first"] = replace(searcher, config=config)
        for name, searcher in searchers.items():
            searches[name] = partial(searched, searcher)
        https = [
            apis.enter_context(over_http(code, port, Path(logs)))
            for port, code in enumerate(codes.values(), start=args.port)
        ]
        searches.update(zip(codes, https, strict=True))
        if args.baseline is not None:
            ours, theirs = https
            same, scored = same_over_http(ours, theirs, asked)
            print(
                f"same ranking over HTTP as {args.baseline}: {same} of {len(asked)} questions"
                f" ({scored} with the same scores too)"
            )
        print(compared(interleaved(searches, asked)))
    if args.pyinstrument is not None:
        profiled(services, asked, args.pyinstrument)
    return 0


if __name__ == "__main__":
    sys.exit(main())
