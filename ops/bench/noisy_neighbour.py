"""Noisy neighbour: does one tenant flooding the costliest searches it is allowed slow another
tenant's ordinary searches?

A private stack (one worker and one API process on the running Elasticsearch and Redis, under
their own prefix: ``api_stack``) serves two tenants. Tenant A's memories (``--a-memories``,
23,000 by default, as in the review that found the problem) are written straight into the
index with bulk requests, with many distinct agent, run, actor and job ids and metadata values,
so the shared term dictionaries are large; tenant B has ``--b-memories`` of its own. Vectors are
random unit vectors (ranking quality is not measured here). Then:

1. quiet: B alone searches one request at a time for ``--seconds``; its p50/p95 are noted;
2. noisy: A floods searches from ``--flood-threads`` threads with the costliest filter the API
   accepts (``MAX_TERM_SCANS`` icontains on keyword fields plus ``--heavy-leaves`` ``nin``
   lists of ``MAX_LIST_ITEMS`` values, as many as ``MAX_LIST_VALUES`` allows), retrying each
   429 after its Retry-After, while B searches as before.

The goal: B's noisy p95 within 1.5 times its quiet p95. The report prints both, the ratio, A's
answered and refused searches, and whether the goal was met.

    .venv/bin/python ops/bench/noisy_neighbour.py [--a-memories 23000] [--b-memories 1000]
        [--seconds 60] [--flood-threads 8] [--heavy-leaves 60] [--port 8790] [--keep]
        [--reuse] [--search-slots N] [--price N]

``--keep`` leaves the seeded indices, which ``--reuse`` then serves without seeding again;
``--search-slots`` sets ``MEMQ_API_SEARCH_SLOTS_PER_TENANT`` for the run (the setting's
default otherwise). ``--price N`` runs no flood: it times N rounds of A's searches alone, one
at a time, interleaved per round (a plain one, the costliest filter, its substring conditions
alone, its lists alone), with the cost budget and the rate limit off, and prints each kind's
p50 and p95: what the filter costs beside a plain search.

Both tenants go through one API process, as on a small deployment: its CPU (query embedding,
JSON) is shared too, so the ratio measures the whole path, not Elasticsearch alone.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from benchlib.stack import Stack, running_stack
from elasticsearch.helpers import bulk

from pipeline.config import Settings
from pipeline.domain.models import Scope, memory_id
from pipeline.store.client import make_client
from pipeline.store.filters import MAX_LEAVES, MAX_LIST_ITEMS, MAX_LIST_VALUES, MAX_TERM_SCANS
from pipeline.store.indices import IndexNames, ensure_indices
from pipeline.store.protocol import MemoryDoc
from pipeline.store.routing import scope_routing

PREFIX = "memqbench-noisy"
DIMS = 384
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
]
QUESTIONS = ["what does the user like", "where did they travel", "who is their friend"]


def memories(tenant: str, count: int, rng: random.Random) -> Iterator[MemoryDoc]:
    """``count`` memories of ``tenant`` over 50 users, with distinct ids and metadata values
    everywhere a keyword can hold them."""
    now = datetime.now(UTC)
    for n in range(count):
        words = " ".join(rng.choice(WORDS) for _ in range(8))
        text = f"memory {n} of {tenant}: {words}"
        scope = Scope(
            tenant=tenant,
            user_id=f"user-{n % 50}",
            agent_id=f"agent-{uuid.uuid4().hex[:12]}",
            run_id=f"run-{uuid.uuid4().hex[:12]}",
        )
        vector = np.random.default_rng(n).standard_normal(DIMS)
        digest = hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()
        yield MemoryDoc(
            id=memory_id(scope, digest),
            scope=scope,
            text=text,
            text_lemmatized=text,
            embedding=(vector / np.linalg.norm(vector)).tolist(),
            hash=digest,
            job_id=f"job-{uuid.uuid4().hex}",
            created_at=now,
            observed_at=now,
            actor_id=f"actor-{uuid.uuid4().hex[:10]}",
            metadata={"topic": uuid.uuid4().hex[:16], "rank": str(n)},
        )


def seed(stack: Stack, tenant: str, count: int) -> None:
    """``count`` memories of ``tenant`` bulk-written into the stack's index."""
    settings = Settings()
    es_config = settings.es.model_copy(update={"index_prefix": stack.prefix})
    client = make_client(es_config)
    names: IndexNames = ensure_indices(client, es_config, DIMS)
    actions = (
        {
            "_op_type": "index",
            "_index": names.memories,
            "_id": doc.id,
            "_routing": scope_routing(doc.scope),
            "_source": doc.source(),
        }
        for doc in memories(tenant, count, random.Random(tenant))
    )
    bulk(client.options(request_timeout=120), actions, chunk_size=1000)
    client.indices.refresh(index=names.memories)


def costliest_filters(rng: random.Random, heavy_leaves: int) -> dict[str, Any]:
    """Every term-walking substring condition allowed, and long ``nin`` lists up to the
    condition limit."""
    fields = ("agent_id", "run_id", "actor_id", "job_id")[:MAX_TERM_SCANS]
    scans = [{f: {"icontains": uuid.uuid4().hex[:3]}} for f in fields]
    leaves = min(heavy_leaves, MAX_LEAVES - len(scans), MAX_LIST_VALUES // MAX_LIST_ITEMS)
    lists = [
        {"hash": {"nin": [uuid.uuid4().hex for _ in range(MAX_LIST_ITEMS)]}} for _ in range(leaves)
    ]
    return {"AND": [{"OR": scans}, *lists], "rank": {"gte": str(rng.randint(0, 9))}}


@dataclass
class Flood:
    answered: int = 0
    refused: int = 0
    errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)


def flood(url: str, key: str, state: Flood, heavy_leaves: int, seed_: int) -> None:
    rng = random.Random(seed_)
    with httpx.Client(base_url=url, headers=auth(key), timeout=60) as http:
        while not state.stop.is_set():
            body = {
                "query": rng.choice(QUESTIONS),
                "user_id": f"user-{rng.randrange(50)}",
                "filters": costliest_filters(rng, heavy_leaves),
            }
            answer = http.post("/v1/memories/search", json=body)
            if answer.status_code == 429:
                state.refused += 1
                state.stop.wait(float(answer.headers.get("retry-after", "1")))
            elif answer.status_code == 200:
                state.answered += 1
            else:
                state.errors += 1


def timed_searches(url: str, key: str, seconds: float) -> list[float]:
    """B's ordinary searches, one at a time, for ``seconds``: each one's latency in ms."""
    rng, latencies = random.Random(7), []
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=url, headers=auth(key), timeout=60) as http:
        while time.monotonic() < deadline:
            body = {"query": rng.choice(QUESTIONS), "user_id": f"user-{rng.randrange(50)}"}
            started = time.perf_counter()
            answer = http.post("/v1/memories/search", json=body)
            latencies.append((time.perf_counter() - started) * 1000)
            answer.raise_for_status()
    return latencies


def priced(url: str, key: str, rounds: int, heavy_leaves: int) -> dict[str, list[float]]:
    """``rounds`` searches of each kind, interleaved: each one's latency in ms."""
    rng = random.Random(11)
    kinds: dict[str, Callable[[], dict[str, Any]]] = {
        "plain": lambda: {},
        "costliest": lambda: costliest_filters(rng, heavy_leaves),
        "substrings alone": lambda: costliest_filters(rng, 0)["AND"][0],
        "lists alone": lambda: {"AND": costliest_filters(rng, heavy_leaves)["AND"][1:]},
    }
    latencies: dict[str, list[float]] = {kind: [] for kind in kinds}
    with httpx.Client(base_url=url, headers=auth(key), timeout=60) as http:
        for _ in range(rounds):
            for kind, make in kinds.items():
                body: dict[str, Any] = {
                    "query": rng.choice(QUESTIONS),
                    "user_id": f"user-{rng.randrange(50)}",
                    "filters": make() or None,
                }
                started = time.perf_counter()
                answer = http.post("/v1/memories/search", json=body)
                latencies[kind].append((time.perf_counter() - started) * 1000)
                answer.raise_for_status()
    return latencies


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def tenant_key(stack: Stack, tenant: str) -> str:
    created = httpx.post(
        f"{stack.url}/v1/admin/keys", json={"tenant": tenant}, headers=auth(stack.admin_key)
    )
    created.raise_for_status()
    return str(created.json()["key"])


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 20 else max(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a-memories", type=int, default=23_000)
    parser.add_argument("--b-memories", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--flood-threads", type=int, default=8)
    parser.add_argument("--heavy-leaves", type=int, default=60)
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--search-slots", type=int, default=None)
    parser.add_argument(
        "--search-cost-per-s", type=int, default=None, help="MEMQ_API_SEARCH_COST_PER_S"
    )
    parser.add_argument("--price", type=int, default=0, metavar="ROUNDS")
    args = parser.parse_args()
    log_dir = Path("/tmp/memq-bench-noisy")
    env = {}
    if args.search_slots is not None:
        env["MEMQ_API_SEARCH_SLOTS_PER_TENANT"] = str(args.search_slots)
    if args.search_cost_per_s is not None:
        env["MEMQ_API_SEARCH_COST_PER_S"] = str(args.search_cost_per_s)
    if args.price:
        env |= {"MEMQ_API_SEARCH_COST_PER_S": "0", "MEMQ_API_RATE_SEARCH_PER_S": "0"}
    with running_stack(PREFIX, args.port, log_dir, args.keep, args.reuse, env=env) as stack:
        if not args.reuse:
            seed(stack, "tenant-a", args.a_memories)
            seed(stack, "tenant-b", args.b_memories)
        key_a, key_b = tenant_key(stack, "tenant-a"), tenant_key(stack, "tenant-b")
        if args.price:
            priced(stack.url, key_a, 10, args.heavy_leaves)  # warm-up
            for kind, times in priced(stack.url, key_a, args.price, args.heavy_leaves).items():
                print(f"{kind}: p50={statistics.median(times):.1f} ms p95={p95(times):.1f} ms")
            return 0
        timed_searches(stack.url, key_b, 5)  # warm-up: models loaded, caches filled
        quiet = timed_searches(stack.url, key_b, args.seconds)
        state = Flood()
        threads = [
            threading.Thread(target=flood, args=(stack.url, key_a, state, args.heavy_leaves, n))
            for n in range(args.flood_threads)
        ]
        for thread in threads:
            thread.start()
        try:
            noisy = timed_searches(stack.url, key_b, args.seconds)
        finally:
            state.stop.set()
            for thread in threads:
                thread.join()
    ratio = p95(noisy) / p95(quiet)
    print(f"B quiet:  n={len(quiet)} p50={statistics.median(quiet):.1f} ms p95={p95(quiet):.1f} ms")
    print(f"B noisy:  n={len(noisy)} p50={statistics.median(noisy):.1f} ms p95={p95(noisy):.1f} ms")
    print(
        f"A flood:  answered={state.answered} refused(429)={state.refused} "
        f"errors={state.errors} over {args.seconds:g} s"
    )
    print(f"B p95 noisy/quiet = {ratio:.2f} (goal <= 1.5): {'met' if ratio <= 1.5 else 'NOT met'}")
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
