"""Export in constant memory: time and peak RSS of ``memq export`` at 10k and 100k memories,
side by side, plain and with history and vectors; and ``memq import`` of the 10k dump.

The memories are written straight into a private index prefix with bulk requests (a shortcut
no user takes: ingesting 100k memories through the pipeline would take hours on this machine
and is not what is measured). Each has memq's document shape: a sentence of the text, a
random unit vector of 384 numbers, metadata, two entity links and one ADD history row. What
is measured is the user's path: the ``memq export`` command as a process of its own, timed
from start to exit, its peak RSS read from ``wait4``. Needs Elasticsearch (``ops/up``).

    .venv/bin/python ops/bench/export_memory.py [--sizes 10000,100000] [--prefix P --keep]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from elasticsearch import Elasticsearch
from elasticsearch.helpers import bulk

from pipeline.config import Settings
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames, drop_indices, ensure_indices
from pipeline.store.routing import history_routing, owner_routing, source_routing

PREFIX = f"memqbench-export-{os.getpid()}"
FULL = ("--history", "--vectors")
DIMS = 384
T0 = datetime(2025, 1, 1, tzinfo=UTC)
WORDS = [
    "coffee",
    "cello",
    "Lisbon",
    "garden",
    "bees",
    "marathon",
    "nurse",
    "Kyoto",
    "violin",
    "recipe",
    "dog",
    "cat",
]


def unit_vector(rng: random.Random) -> list[float]:
    raw = [rng.gauss(0, 1) for _ in range(DIMS)]
    norm = sum(x * x for x in raw) ** 0.5
    return [round(x / norm, 6) for x in raw]


def memory_actions(names: IndexNames, tenant: str, count: int) -> Iterator[dict[str, Any]]:
    rng = random.Random(count)
    for n in range(count):
        at = (T0 + timedelta(seconds=n)).isoformat()
        text = f"memory {n}: the user likes {rng.choice(WORDS)} and {rng.choice(WORDS)}"
        scope = {"tenant": tenant, "user_id": f"user-{n % 50}"}
        entities = [f"{tenant}-{n % 50}-{rng.choice(WORDS)}" for _ in range(2)]
        yield {
            "_index": names.memories,
            "_id": f"{tenant}-mem-{n}",
            "_routing": source_routing(scope),
            "_source": {
                **scope,
                "text": text,
                "text_lemmatized": text,
                "embedding": unit_vector(rng),
                "hash": f"{n:032x}",
                "job_id": f"job-{n}",
                "role": "user",
                "attributed_to": "user",
                "language": "en",
                "metadata": {"n": n, "source": "bench"},
                "metadata_kv": [f"n={n}", "source=bench"],
                "entity_ids": sorted(set(entities)),
                "created_at": at,
                "updated_at": at,
                "observed_at": at,
            },
        }
        yield {
            "_index": names.history,
            "_id": f"{tenant}-hist-{n}",
            "_routing": history_routing(f"{tenant}-mem-{n}", f"{tenant}-hist-{n}"),
            "_source": {
                **scope,
                "memory_id": f"{tenant}-mem-{n}",
                "event": "ADD",
                "job_id": f"job-{n}",
                "new": text,
                "created_at": at,
            },
        }


def entity_actions(names: IndexNames, tenant: str) -> Iterator[dict[str, Any]]:
    rng = random.Random(0)
    for user in range(50):
        for word in WORDS:
            yield {
                "_index": names.entities,
                "_id": f"{tenant}-{user}-{word}",
                "_routing": owner_routing(tenant, f"user-{user}", None, None),
                "_source": {
                    "tenant": tenant,
                    "user_id": f"user-{user}",
                    "text": word,
                    "normalized": word.casefold(),
                    "type": "thing",
                    "embedding": unit_vector(rng),
                    "linked_memory_ids": [],
                    "created_at": T0.isoformat(),
                    "updated_at": T0.isoformat(),
                },
            }


def seed(es: Elasticsearch, names: IndexNames, tenant: str, size: int) -> None:
    """``size`` memories in ``tenant``, unless they are there from a kept earlier run."""
    found = es.count(index=names.memories, query={"term": {"tenant": tenant}})["count"]
    if found == size:
        return
    started = time.perf_counter()
    bulk(es, entity_actions(names, tenant), chunk_size=1000)
    bulk(es, memory_actions(names, tenant, size), chunk_size=2000)
    print(f"  seeded {size} memories in {time.perf_counter() - started:.0f} s", flush=True)


def run_memq(env: dict[str, str], *args: str) -> tuple[float, float]:
    """Wall time (s) and peak RSS (MB) of one ``memq`` command run as its own process."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "memq.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    stderr = process.stderr.read().decode() if process.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"memq {' '.join(args)} failed: {stderr}")
    return elapsed, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--prefix", default=PREFIX, help="index prefix (reused with --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the bench indices")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    settings = Settings(es={"index_prefix": args.prefix})  # type: ignore[arg-type]
    env = {**os.environ, "MEMQ_ES_INDEX_PREFIX": args.prefix}
    es = make_client(settings.es).options(request_timeout=300)
    names = ensure_indices(es, settings.es, DIMS)
    rows: list[tuple[str, int, float, float, int]] = []
    try:
        for size in sizes:  # every size seeded first, then measured side by side
            seed(es, names, f"bench-{size}", size)
        es.indices.refresh(index=f"{names.memories},{names.history},{names.entities}")
        with tempfile.TemporaryDirectory() as tmp:
            for label, extra in (("export", ()), ("export --history --vectors", FULL)):
                for size in sizes:
                    out = Path(tmp) / f"dump-{size}.jsonl"
                    command = ("export", "--tenant", f"bench-{size}", *extra, "-o", str(out))
                    elapsed, rss = run_memq(env, *command)
                    rows.append((label, size, elapsed, rss, out.stat().st_size))
                    print(f"  {label:28} {size:>7} {elapsed:7.1f} s {rss:7.0f} MB", flush=True)
            dump = Path(tmp) / f"dump-{sizes[0]}.jsonl"
            rows.append(import_row(es, settings, env, dump, sizes[0]))
    finally:
        if not args.keep:
            drop_indices(es, names)
    print_table(rows)
    return 0


def import_row(
    es: Elasticsearch, settings: Settings, env: dict[str, str], dump: Path, size: int
) -> tuple[str, int, float, float, int]:
    """``memq import`` of the dump into a second memq (another prefix), vectors reused."""
    prefix = f"{PREFIX}-restore"
    target = ensure_indices(es, settings.es.model_copy(update={"index_prefix": prefix}), DIMS)
    try:
        elapsed, rss = run_memq({**env, "MEMQ_ES_INDEX_PREFIX": prefix}, "import", str(dump))
    finally:
        drop_indices(es, target)
    print(f"  {'import (vectors reused)':28} {size:>7} {elapsed:7.1f} s {rss:7.0f} MB", flush=True)
    return ("import (vectors reused)", size, elapsed, rss, dump.stat().st_size)


def print_table(rows: list[tuple[str, int, float, float, int]]) -> None:
    print("\n| command | memories | time (s) | memories/s | peak RSS (MB) | dump (MB) |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, size, elapsed, rss, dump_bytes in rows:
        print(
            f"| memq {label} | {size:,} | {elapsed:.1f} | {size / elapsed:,.0f} | {rss:.0f} "
            f"| {dump_bytes / 1e6:.0f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
