"""What one memory costs Elasticsearch, and what the shard count does to search: the numbers
docs/SCALING.md's capacity plan is built from.

For each shard count (1 and 3 by default) memq's real memories index is created (its template
and mapping, 384-dim int8-HNSW vectors) under a private prefix, and grown through the sizes
given (1k then 10k by default). Memories are written through the store's bulk path
(``ElasticStore.create_memories``), NOT through the LLM pipeline: a shortcut no user takes,
fine for sizes, which depend on the documents and not on how they arrived. Each memory is a
synthetic sentence from templates, its vector a seeded random unit vector (HNSW over random
vectors is a pessimistic case for graph size), spread over SCOPES users of one tenant.

At each size, after a refresh and a flush of every index, and once no merge runs on it:
disk (``store.size_in_bytes`` of the primaries), the vector data Elasticsearch keeps off the
heap (``dense_vector.off_heap``: the int8 copy searched, the HNSW graph, the raw floats used to
rescore), heap held by segments, and the p50/p95 of SEARCHES memq hybrid searches
(``Searcher.search``: kNN with the scope filter, BM25, entity boost; query embedded in process
by the local MiniLM), each in one user's scope, the same query on every shard count in turn,
interleaved, so that the machine's load falls on each alike.

    .venv/bin/python ops/bench/scaling.py [--sizes 1000,10000] [--shards 1,3]

Needs Elasticsearch (``MEMQ_ES_URL``; the stack's by default). Leaves nothing behind.
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from pipeline.adapters.nlp.lemmatize import normalize_for_hash
from pipeline.config import Settings
from pipeline.domain.models import Scope, md5_hex, memory_id
from pipeline.serving.search import Searcher, SearchQuery
from pipeline.store.client import make_client
from pipeline.store.indices import drop_indices, ensure_indices
from pipeline.store.protocol import MemoryDoc
from workers.runtime import Runtime

DIMS = 384
SCOPES = 100
SEARCHES = 100
BULK = 500
PEOPLE = ["Ana", "Bo", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana", "Ivo", "Jun"]
DOINGS = ["hikes", "paints", "cooks ramen", "plays chess", "reads poetry", "runs", "sails"]
PLACES = ["in Lisbon", "near the lake", "at the club", "in Osaka", "downtown", "at home"]
WHEN = ["every Sunday", "in May", "after work", "on holidays", "at dawn", "twice a week"]
QUESTIONS = ["who paints", "where does Ana hike", "chess on Sunday", "ramen in Osaka"]


@dataclass
class Point:
    shards: int
    size: int
    disk_b: int
    off_heap_b: dict[str, int]
    segments_heap_b: int
    p50_ms: float
    p95_ms: float


def sentence(rng: random.Random, n: int) -> str:
    parts = (rng.choice(PEOPLE), rng.choice(DOINGS), rng.choice(PLACES), rng.choice(WHEN))
    return f"{' '.join(parts)} (note {n})"


def memories(rng: random.Random, start: int, count: int, now: datetime) -> list[MemoryDoc]:
    vectors = np.random.default_rng(start).standard_normal((count, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    docs = []
    for i in range(count):
        scope = Scope(tenant="scaling", user_id=f"u{(start + i) % SCOPES}")
        text = sentence(rng, start + i)
        digest = md5_hex(normalize_for_hash(text))
        docs.append(
            MemoryDoc(
                id=memory_id(scope, digest),
                scope=scope,
                text=text,
                text_lemmatized=text.lower(),
                embedding=vectors[i].tolist(),
                hash=digest,
                job_id="scaling-bench",
                created_at=now,
                observed_at=now,
            )
        )
    return docs


def runtime_for(shards: int) -> Runtime:
    base = Settings()
    prefix = f"memqbench-scaling-{shards}-{uuid.uuid4().hex[:6]}"
    es_config = base.es.model_copy(update={"index_prefix": prefix, "shards": shards})
    settings = base.model_copy(
        update={"es": es_config, "embedder": base.embedder.model_copy(update={"kind": "local"})}
    )
    runtime = Runtime(settings)
    ensure_indices(runtime.es, settings.es, DIMS)
    return runtime


def grow(runtime: Runtime, rng: random.Random, have: int, want: int) -> None:
    now = datetime.now(UTC)
    for start in range(have, want, BULK):
        outcome = runtime.store.create_memories(memories(rng, start, min(BULK, want - start), now))
        assert not outcome.failed, list(outcome.failed.items())[:3]


def index_stats(runtime: Runtime, settle_s: float = 600) -> dict[str, Any]:
    """Sizes after a refresh and a flush, once Elasticsearch has no merge running on the index
    (the merges a bulk load sets off would otherwise be measured with the searches)."""
    index = runtime.store.names.memories
    runtime.es.indices.refresh(index=index)
    runtime.es.indices.flush(index=index)
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        merges = runtime.es.indices.stats(index=index, metric="merge")["_all"]["total"]["merges"]
        if merges["current"] == 0:
            break
        time.sleep(1)
    stats = runtime.es.indices.stats(index=index, metric="store,segments,dense_vector")
    primaries: dict[str, Any] = stats["_all"]["primaries"]
    return primaries


def search_ms(searchers: list[Searcher], rng: random.Random) -> list[list[float]]:
    """SEARCHES scoped searches on each searcher, interleaved (A B, then B A, ...) so that the
    machine's load falls on every shard count alike; the milliseconds of each, per searcher."""
    for searcher in searchers:  # warm-up
        for question in QUESTIONS:
            searcher.search(
                SearchQuery(query=question, scope=Scope(tenant="scaling", user_id="u0"))
            )
    took: list[list[float]] = [[] for _ in searchers]
    for turn in range(SEARCHES):
        scope = Scope(tenant="scaling", user_id=f"u{rng.randrange(SCOPES)}")
        query = SearchQuery(query=rng.choice(QUESTIONS), scope=scope, top_k=10)
        order = list(range(len(searchers)))
        for i in order[turn % len(order) :] + order[: turn % len(order)]:
            began = time.perf_counter()
            searchers[i].search(query)
            took[i].append((time.perf_counter() - began) * 1000)
    return took


def measure(shard_counts: list[int], sizes: list[int]) -> list[Point]:
    runtimes = [runtime_for(shards) for shards in shard_counts]
    rng, have, points = random.Random(7), 0, []
    try:
        for size in sizes:
            for shards, runtime in zip(shard_counts, runtimes, strict=True):
                grow(runtime, random.Random(size + shards), have, size)
            have = size
            took = search_ms([runtime.searcher for runtime in runtimes], rng)
            for shards, runtime, times in zip(shard_counts, runtimes, took, strict=True):
                points.append(point(shards, size, index_stats(runtime), times))
                print(report(points[-1]), flush=True)
    finally:
        for runtime in runtimes:
            drop_indices(runtime.es, runtime.store.names)
    return points


def point(shards: int, size: int, stats: dict[str, Any], took: list[float]) -> Point:
    off_heap = stats["dense_vector"].get("off_heap", {})
    return Point(
        shards=shards,
        size=size,
        disk_b=stats["store"]["size_in_bytes"],
        off_heap_b={k: v for k, v in off_heap.items() if v},
        segments_heap_b=stats["segments"]["memory_in_bytes"],
        p50_ms=float(np.percentile(took, 50)),
        p95_ms=float(np.percentile(took, 95)),
    )


def report(p: Point) -> str:
    per = {k.removeprefix("total_").removesuffix("_size_bytes"): v / p.size
           for k, v in p.off_heap_b.items() if k != "total_size_bytes"}  # fmt: skip
    vectors = ", ".join(f"{k} {v:.0f}" for k, v in sorted(per.items()))
    return (
        f"| {p.shards} | {p.size:,} | {p.disk_b / p.size:.0f} | "
        f"{p.off_heap_b.get('total_size_bytes', 0) / p.size:.0f} ({vectors}) | "
        f"{p.segments_heap_b} | {p.p50_ms:.1f} | {p.p95_ms:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--shards", default="1,3")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    es = make_client(Settings().es)
    health = es.cluster.health()
    print(f"Elasticsearch: {health['number_of_nodes']} node(s), status {health['status']}")
    print("| shards | memories | disk B/memory | vector off-heap B/memory | segment heap B "
          "| search p50 ms | search p95 ms |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    measure([int(s) for s in args.shards.split(",")], sizes)
    leftover = es.indices.get_alias(index="memqbench-scaling-*", ignore_unavailable=True)
    assert not leftover.body, f"left behind: {list(leftover.body)}"


if __name__ == "__main__":
    main()
