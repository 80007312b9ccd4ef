"""What each part of a search's round trips costs: the searcher's own msearch bodies, sent again
as they are and as variants, on the scope ``search_latency.py --keep`` leaves (prefix
``memqbench-latency``).

memq's search (``Searcher.search``) is run once for each of N template questions with the
store's ``search_indices`` and the embedder wrapped, so that every round trip it makes is kept
(its searches, their index and scope) and each search's time is split: its round trips, the
query's embedding, and the rest (the searcher's own Python). Each kept round trip of one
kind (``hybrid search``: the candidate lists; ``hybrid search (shown)``: what the best show)
is then sent again through the store, once as it was and once as each variant, the order
shuffled per round trip, ``--rounds`` times.
The wall time of each msearch and the largest ``took`` of its searches are reported, p50 and
p95, beside the answer's size. Only the round trip is timed: the rest of a search (embedding,
ranking) is not, and no ranking is made from a variant's answer, so a variant says what a
change would save, not what it would find (that is LoCoMo's and the knowledge updates' part).

Variants of the candidate round:
- ``sources``: the kNN and BM25 lists' hits also read the fields a hit shows (``DOC_FIELDS``
  of their ``_source``), which would spare the last round its sources;
- ``no links``: the entities read without their ``linked_memory_ids``;
- ``no vectors``: the BM25 hits without their vectors;
- ``now rounded``: the expiry and validity filters' ``now`` rounded to the minute (cacheable);
- ``candidates 100``: the kNN's ``num_candidates`` 100 instead of 4 per hit.
Variants of the last round:
- ``one search``: the sources of the best and the reply read by one search, not two;
- ``sources only``: the best's sources alone (what the reply and rivals add).

    .venv/bin/python ops/bench/search_latency.py --sizes 100000 --keep
    .venv/bin/python ops/bench/search_rounds.py [--queries 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from benchlib.search import MEMQ_PREFIX, SEED, questions, search_query, settings_for
from benchlib.stats import percentile

from pipeline.domain.models import Scope
from pipeline.services import Services
from pipeline.store.protocol import SearchIndex
from pipeline.store.queries import DOC_FIELDS

Searches = list[tuple[SearchIndex, Scope | None, dict[str, Any]]]
Variant = Callable[[Searches], Searches]
CANDIDATES = "hybrid search"
SHOWN = "hybrid search (shown)"


@dataclass
class Capture:
    """Every round trip of the searches, by kind (its searches, and whether it asked for the
    named queries' scores), and each search's time split in ms: all of it, its round trips,
    the query's embedding, and the rest (the searcher's own Python)."""

    kept: dict[str, list[tuple[Searches, bool]]] = field(
        default_factory=lambda: {CANDIDATES: [], SHOWN: []}
    )
    split: dict[str, list[float]] = field(
        default_factory=lambda: {"search": [], "round trips": [], "embedding": [], "rest": []}
    )


def captured(services: Services, asked: Sequence[str]) -> Capture:
    """``asked``'s searches, each once, with the store's ``search_indices`` and the embedder
    wrapped to keep and time what they do."""
    searcher = services.searcher
    store, embedder = searcher.store, searcher.embedder
    out, spent = Capture(), {"round trips": 0.0, "embedding": 0.0}
    search_indices, embed = store.search_indices, embedder.embed

    def keeping(
        searches: Sequence[tuple[SearchIndex, Scope | None, dict[str, Any]]],
        what: str,
        named: bool = False,
    ) -> list[dict[str, Any]]:
        if what in out.kept:
            out.kept[what].append((copy.deepcopy(list(searches)), named))
        started = time.perf_counter()
        try:
            return search_indices(searches, what, named)
        finally:
            spent["round trips"] += time.perf_counter() - started

    def embedding(texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return embed(texts)
        finally:
            spent["embedding"] += time.perf_counter() - started

    store.search_indices = keeping  # type: ignore[method-assign,assignment]
    embedder.embed = embedding  # type: ignore[method-assign]
    try:
        for query in asked:
            spent.update(dict.fromkeys(spent, 0.0))
            started = time.perf_counter()
            searcher.search(search_query(query))
            whole = time.perf_counter() - started
            for name, seconds in [*spent.items(), ("search", whole)]:
                out.split[name].append(seconds * 1000)
            out.split["rest"].append((whole - sum(spent.values())) * 1000)
    finally:
        store.search_indices = search_indices  # type: ignore[method-assign]
        embedder.embed = embed  # type: ignore[method-assign]
    return out


def split_report(split: dict[str, list[float]]) -> str:
    rows = [
        f"one search in this process, {len(split['search'])} questions",
        "| part | p50 / p95 ms |",
        "|---|---|",
    ]
    for name, ms in split.items():
        rows.append(f"| {name} | {percentile(ms, 50):.1f} / {percentile(ms, 95):.1f} |")
    return "\n".join(rows)


def changed(
    searches: Searches, change: Callable[[str, dict[str, Any]], dict[str, Any]]
) -> Searches:
    return [(index, scope, change(index, copy.deepcopy(body))) for index, scope, body in searches]


def is_knn(index: str, body: dict[str, Any]) -> bool:
    return index == "memories" and "knn" in body


def is_bm25(index: str, body: dict[str, Any]) -> bool:
    """The BM25 list (the hop reads the same fields, but its question is a ``must``)."""
    query = body.get("query", {}).get("bool", {})
    return index == "memories" and "docvalue_fields" in body and "should" in query


def with_sources(index: str, body: dict[str, Any]) -> dict[str, Any]:
    if is_knn(index, body) or is_bm25(index, body):
        body["_source"] = {"includes": list(DOC_FIELDS)}
    return body


def without_links(index: str, body: dict[str, Any]) -> dict[str, Any]:
    if index == "entities":
        body["_source"] = {"includes": ["normalized"]}
    return body


def without_vectors(index: str, body: dict[str, Any]) -> dict[str, Any]:
    if is_bm25(index, body):
        body["docvalue_fields"] = [f for f in body["docvalue_fields"] if isinstance(f, str)]
    return body


def now_rounded(index: str, body: dict[str, Any]) -> dict[str, Any]:
    rounded: dict[str, Any] = orjson.loads(
        orjson.dumps(body).replace(b'"gt":"now"', b'"gt":"now/m"')
    )
    return rounded


def fewer_candidates(index: str, body: dict[str, Any]) -> dict[str, Any]:
    if is_knn(index, body):
        body["knn"]["num_candidates"] = 100
    return body


def one_search(searches: Searches) -> Searches:
    """The best's sources and the reply (two searches of the same scope and filters, with
    the same fields) as one search for either."""
    reads = [s for s in searches if s[2].get("_source") not in (None, False)]
    if len(reads) != 2:
        return searches
    (index, scope, a), (_, _, b) = reads
    filters = [a["query"]["bool"]["filter"], b["query"]["bool"]["filter"]]
    common = [c for c in filters[0] if c in filters[1]]
    own = [[c for c in f if c not in common] for f in filters]
    body = {
        "size": a["size"] + b["size"],
        "_source": a["_source"],
        "query": {
            "bool": {
                "filter": [
                    *common,
                    {
                        "bool": {
                            "should": [{"bool": {"filter": o}} for o in own],
                            "minimum_should_match": 1,
                        }
                    },
                ]
            }
        },
    }
    return [(index, scope, body), *[s for s in searches if s not in reads]]


VARIANTS: dict[str, dict[str, Variant]] = {
    CANDIDATES: {
        "as searched": list,
        "sources": lambda s: changed(s, with_sources),
        "no links": lambda s: changed(s, without_links),
        "no vectors": lambda s: changed(s, without_vectors),
        "now rounded": lambda s: changed(s, now_rounded),
        "candidates 100": lambda s: changed(s, fewer_candidates),
    },
    SHOWN: {
        "as searched": list,
        "one search": one_search,
        "sources only": lambda s: s[:1],
    },
}


def timed(
    services: Services,
    kept: list[tuple[Searches, bool]],
    variants: dict[str, Variant],
    rounds: int,
    rng: random.Random,
) -> dict[str, dict[str, list[float]]]:
    store = services.searcher.store
    out: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "took": [], "kb": []} for name in variants
    }
    for _ in range(rounds):
        for searches, named in kept:
            names = list(variants)
            rng.shuffle(names)
            for name in names:
                sent = variants[name](searches)
                started = time.perf_counter()
                answers = store.search_indices(sent, "search rounds", named)
                out[name]["wall"].append((time.perf_counter() - started) * 1000)
                out[name]["took"].append(max(float(a["took"]) for a in answers))
                out[name]["kb"].append(len(orjson.dumps(answers)) / 1000)
    return out


def report(what: str, times: dict[str, dict[str, list[float]]]) -> str:
    rows = [
        f"{what}, {len(times['as searched']['wall'])} msearches each",
        "| variant | wall p50 / p95 ms | slowest took p50 / p95 ms | answer KB p50 |",
        "|---|---|---|---|",
    ]
    for name, t in times.items():
        rows.append(
            f"| {name} | {percentile(t['wall'], 50):.2f} / {percentile(t['wall'], 95):.2f}"
            f" | {percentile(t['took'], 50):.1f} / {percentile(t['took'], 95):.1f}"
            f" | {percentile(t['kb'], 50):.1f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rng = random.Random(SEED)
    asked = questions(random.Random(SEED), args.queries)
    services = Services(settings_for(MEMQ_PREFIX))
    for query in asked[:10]:  # models loaded, connections open
        services.searcher.search(search_query(query))
    capture = captured(services, asked)
    print(split_report(capture.split))
    for what, variants in VARIANTS.items():
        print(report(what, timed(services, capture.kept[what], variants, args.rounds, rng)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
