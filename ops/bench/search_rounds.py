"""What each part of a search's round trips costs: the searcher's own msearch bodies, sent again
as they are and as variants, on the scope ``search_latency.py --keep`` leaves (prefix
``memqbench-latency``).

memq's search (``Searcher.search``) is run once for each of N template questions over a timed
store and embedder (``benchlib.timing``), and every round trip it makes is kept as it was
built (``pipeline.serving.rounds.Round``: each search under the searcher's key for it, with
its index and scope). Each search's time is split: its round trips, the query's embedding, and
the rest (the searcher's own Python). Each kept round trip of one kind (``hybrid search``: the
candidate lists; ``hybrid search (shown)``: what the best show) is then sent again through the
store, once as it was and once as each variant, the order shuffled per round trip,
``--rounds`` times. Of these replays the wall time of each msearch and the largest ``took`` of
its searches are reported, p50 and p95, beside the answer's size; they time the round trip
alone, and no ranking is made from a variant's answer, so a variant says what a change would
save, not what it would find (that is LoCoMo's and the knowledge updates' part).

Variants of the candidate round:
- ``sources``: the kNN and BM25 lists' hits also read the fields a hit shows (``DOC_FIELDS``
  of their ``_source``), which would spare the last round its sources;
- ``no links``: the entities read without their ``linked_memory_ids``;
- ``no vectors``: the BM25 hits without their vectors;
- ``now rounded``: the expiry and validity filters' ``now`` rounded to the minute (cacheable);
- ``candidates 100``: the kNN's ``num_candidates`` 100 instead of 4 per hit;
- ``uncounted``: every search with ``track_total_hits`` off (nothing reads the total), and
  ``BM25 alone, uncounted``: the BM25 list's search alone so;
- ``kNN alone``, ``BM25 alone``, ``kNN and BM25``: only those lists' searches, which tells
  what the others add to the round trip;
- ``kNN alone`` and then ``no rescore`` (no BM25 score for its hits), ``no columns`` (no
  ``docvalue_fields``), ``as a knn query with BM25 beside it`` (a ``knn`` query inside a
  ``bool`` whose ``should`` is the rescore's BM25 query, both scores read by name: the same
  hits and scores without a rescore) or ``as the floor's`` (the floor's ten hits of 100
  candidates, no columns, no rescore, under the searcher's filters): what each part of the
  kNN search costs.
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
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import orjson
from benchlib.search import (
    MEMQ_PREFIX,
    SEED,
    TOP_K,
    floor_knn,
    questions,
    search_query,
    settings_for,
)
from benchlib.stats import percentile
from benchlib.timing import Timed

from pipeline.domain.models import Scope
from pipeline.services import Services
from pipeline.serving.rounds import Key, Round
from pipeline.store.protocol import SearchIndex, ServingStore
from pipeline.store.queries import DOC_FIELDS

Searches = list[tuple[Key, SearchIndex, Scope | None, dict[str, Any]]]
Variant = Callable[[Searches], Searches]
CANDIDATES = "hybrid search"
SHOWN = "hybrid search (shown)"
REPLAY = "search rounds"


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
    """``asked``'s searches, each once, over a timed store and embedder, every round trip kept
    as its ``Round`` held it (the one place its searches carry their keys)."""
    out = Capture()
    store = Timed(services.searcher.store, "store")
    embedder = Timed(services.searcher.embedder, "embedder")
    searcher = replace(services.searcher, store=store, embedder=embedder)
    run = Round.run

    def keeping(
        round_: Round, on: ServingStore, what: str, named: bool = False
    ) -> dict[Key, dict[str, Any]]:
        if what in out.kept:
            out.kept[what].append((copy.deepcopy(round_.searches), named))
        return run(round_, on, what, named)

    with mock.patch.object(Round, "run", autospec=True, side_effect=keeping):
        for query in asked:
            before, own = (store.spent_ms, embedder.spent_ms), store.own_ms
            started = time.perf_counter()
            searcher.search(search_query(query))
            whole = (time.perf_counter() - started) * 1000 - (store.own_ms - own)
            trips, embedding = store.spent_ms - before[0], embedder.spent_ms - before[1]
            out.split["search"].append(whole)
            out.split["round trips"].append(trips)
            out.split["embedding"].append(embedding)
            out.split["rest"].append(whole - trips - embedding)
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
    searches: Searches, kinds: set[str], change: Callable[[dict[str, Any]], dict[str, Any]]
) -> Searches:
    """``searches`` with ``change`` made to (a copy of) each body whose key is of ``kinds``."""
    return [
        (key, index, scope, change(copy.deepcopy(body)) if key[1] in kinds else body)
        for key, index, scope, body in searches
    ]


def with_sources(body: dict[str, Any]) -> dict[str, Any]:
    body["_source"] = {"includes": list(DOC_FIELDS)}
    return body


def without_links(body: dict[str, Any]) -> dict[str, Any]:
    body["_source"] = {"includes": ["normalized"]}
    return body


def without_vectors(body: dict[str, Any]) -> dict[str, Any]:
    body["docvalue_fields"] = [f for f in body["docvalue_fields"] if isinstance(f, str)]
    return body


def now_rounded(body: dict[str, Any]) -> dict[str, Any]:
    rounded: dict[str, Any] = orjson.loads(
        orjson.dumps(body).replace(b'"gt":"now"', b'"gt":"now/m"')
    )
    return rounded


def fewer_candidates(body: dict[str, Any]) -> dict[str, Any]:
    body["knn"]["num_candidates"] = 100
    return body


def without(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(body: dict[str, Any]) -> dict[str, Any]:
        body.pop(name, None)
        return body

    return change


def as_floor(body: dict[str, Any]) -> dict[str, Any]:
    """The floor's kNN request (``benchlib.search.floor_search``: no columns, no rescore) for
    the searcher's vector, under its filters."""
    knn = floor_knn(body["knn"]["query_vector"], body["knn"]["filter"])
    return {"size": TOP_K, "_source": False, "knn": knn}


def knn_query_scored(body: dict[str, Any]) -> dict[str, Any]:
    """The kNN list as a ``knn`` query inside a ``bool`` whose ``should`` is the rescore's
    BM25 query: each hit's similarity and BM25 score read by name, without a rescore."""
    knn = {**body.pop("knn"), "_name": "knn"}
    bm25 = body.pop("rescore")["query"]["rescore_query"]
    body["query"] = {"bool": {"must": [{"knn": knn}], "should": [bm25]}}
    return body


def uncounted(body: dict[str, Any]) -> dict[str, Any]:
    body["track_total_hits"] = False
    return body


def one_search(searches: Searches) -> Searches:
    """Each query's best sources and reply (two searches of the same scope and filters, with
    the same fields) as one search for either."""
    out = list(searches)
    by_key = {s[0]: s for s in searches}
    for docs in [s for s in searches if s[0][1] == "docs"]:
        reply = by_key.get((docs[0][0], "replies"))
        if reply is None:
            continue
        (key, index, scope, a), b = docs, reply[3]
        filters = [a["query"]["bool"]["filter"], b["query"]["bool"]["filter"]]
        common = [c for c in filters[0] if c in filters[1]]
        own = [[c for c in f if c not in common] for f in filters]
        should = [{"bool": {"filter": o}} for o in own]
        either = {"bool": {"should": should, "minimum_should_match": 1}}
        body = {
            "size": a["size"] + b["size"],
            "_source": a["_source"],
            "query": {"bool": {"filter": [*common, either]}},
        }
        out = [(key, index, scope, body) if s is docs else s for s in out if s is not reply]
    return out


def only(kinds: set[str]) -> Variant:
    return lambda searches: [s for s in searches if s[0][1] in kinds]


def alone(kind: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Variant:
    """The searches of one ``kind`` (``knn``, ``bm25``) alone, with ``change`` made to each."""
    return lambda searches: changed(only({kind})(searches), {kind}, change)


CANDIDATE_KINDS = {"knn", "bm25", "entities", "hop"}
"""Every search of the candidate round, by the searcher's key for it."""

VARIANTS: dict[str, dict[str, Variant]] = {
    CANDIDATES: {
        "as searched": list,
        "sources": lambda s: changed(s, {"knn", "bm25"}, with_sources),
        "no links": lambda s: changed(s, {"entities"}, without_links),
        "no vectors": lambda s: changed(s, {"bm25"}, without_vectors),
        "now rounded": lambda s: changed(s, CANDIDATE_KINDS, now_rounded),
        "candidates 100": lambda s: changed(s, {"knn"}, fewer_candidates),
        "uncounted": lambda s: changed(s, CANDIDATE_KINDS, uncounted),
        "BM25 alone, uncounted": alone("bm25", uncounted),
        "kNN alone": only({"knn"}),
        "kNN alone, no rescore": alone("knn", without("rescore")),
        "kNN alone, no columns": alone("knn", without("docvalue_fields")),
        "kNN alone, as a knn query with BM25 beside it": alone("knn", knn_query_scored),
        "kNN alone, as the floor's": alone("knn", as_floor),
        "BM25 alone": only({"bm25"}),
        "kNN and BM25": only({"knn", "bm25"}),
    },
    SHOWN: {
        "as searched": list,
        "one search": one_search,
        "sources only": only({"docs"}),
    },
}


def timed(
    services: Services,
    kept: list[tuple[Searches, bool]],
    variants: dict[str, Variant],
    rounds: int,
    rng: random.Random,
) -> dict[str, dict[str, list[float]]]:
    """Each variant's msearches: their wall time and slowest ``took`` in ms, answers in KB."""
    stores = {name: Timed(services.searcher.store, "store") for name in variants}
    for _ in range(rounds):
        for searches, named in kept:
            names = list(variants)
            rng.shuffle(names)
            for name in names:
                sent = [(index, scope, body) for _, index, scope, body in variants[name](searches)]
                stores[name].search_indices(sent, REPLAY, named)
    key = f"store.search_indices ({REPLAY})"
    return {
        name: {
            "wall": store.timings[key],
            "took": store.timings[f"{key}: slowest search, Elasticsearch's took"],
            "kb": store.timings[f"{key}: answer, KB of JSON"],
        }
        for name, store in stores.items()
    }


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
