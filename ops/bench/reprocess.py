"""``memq reprocess --reembed`` throughput, and what a searcher meanwhile sees.

Under a private index prefix, ``--memories`` memories (synthetic sentences over ``--users``
users, random unit vectors of 64 dimensions, as if made by the "old" embedder: the scripted
OpenAI-compatible server of the tests) are written straight through the store. Then:
1. quiet: one thread searches (``Searcher``, in process, the query embedded by the old
   embedder) for ``--seconds`` seconds;
2. rebuild: ``reembed`` moves the memories onto the local MiniLM (384 dimensions, the real
   model cost) while the same thread keeps searching, until the swap (and a little after).

It prints the memories re-embedded per second and the searcher's p50/p95 (ms) quiet and during
the rebuild, and the searches that failed (expected: 0). Needs the stack of ``ops/up``.

    .venv/bin/python ops/bench/reprocess.py [--memories 5000] [--users 50] [--seconds 15]
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from datetime import UTC, datetime

import numpy as np
from benchlib.model import ScriptedModel
from benchlib.searching import TENANT, Searching, during
from benchlib.stats import percentiles
from benchlib.words import sentence

from pipeline.adapters.embedding.versioned import EmbedderSpec, settings_models
from pipeline.config import Settings
from pipeline.domain.models import Scope, history_id, md5_hex, memory_id
from pipeline.services import build_deps, make_searcher
from pipeline.store.client import make_client
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames, drop_indices, ensure_indices
from pipeline.store.protocol import HistoryDoc, MemoryDoc
from pipeline.store.reprocess import reembed

PREFIX = "memqbench-reprocess"
OLD_DIMS = 64
NEW = EmbedderSpec(kind="local", model="all-MiniLM-L6-v2", dims=384)


def seed(store: ElasticStore, count: int, users: int) -> list[str]:
    """``count`` memories with random vectors of the old size; their texts."""
    rng, vectors = random.Random(7), np.random.default_rng(7)
    at, texts, batch = datetime(2025, 1, 1, tzinfo=UTC), [], []
    for n in range(count):
        scope = Scope(tenant=TENANT, user_id=f"u{n % users}")
        text = f"{sentence(rng)} (note {n})"
        vector = vectors.standard_normal(OLD_DIMS)
        text_hash = md5_hex(text.lower())
        doc = MemoryDoc(
            id=memory_id(scope, text_hash), scope=scope, text=text, text_lemmatized=text.lower(),
            embedding=[float(x) for x in vector / np.linalg.norm(vector)], hash=text_hash,
            job_id="bench", created_at=at, observed_at=at,
        )  # fmt: skip
        batch.append((doc, HistoryDoc(history_id(doc.id, "ADD", "bench"), doc.id, scope, "ADD",
                                      "bench", at, new=text)))  # fmt: skip
        texts.append(text)
        if len(batch) == 2000 or n == count - 1:
            store.create_memories_with_history([d for d, _ in batch], [r for _, r in batch])
            batch = []
    store.client.indices.refresh(index=store.names.memories)
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=5000)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    with ScriptedModel(dims=OLD_DIMS) as old:
        base = Settings()
        settings = base.model_copy(update={
            "es": base.es.model_copy(update={"index_prefix": PREFIX}),
            "embedder": base.embedder.model_copy(update={
                "kind": "openai", "model": "old", "dims": OLD_DIMS, "base_url": old.base_url}),
        })  # fmt: skip
        client = make_client(settings.es)
        drop_indices(client, IndexNames(PREFIX))
        store = ElasticStore(client, ensure_indices(client, settings.es, OLD_DIMS))
        try:
            run(settings, store, args)
        finally:
            drop_indices(client, IndexNames(PREFIX))
            for index in client.indices.get(index=f"{PREFIX}-*").body:
                client.indices.delete(index=index)


def run(settings: Settings, store: ElasticStore, args: argparse.Namespace) -> None:
    texts = seed(store, args.memories, args.users)
    searcher = make_searcher(
        settings, store, build_deps(settings, store, lambda: datetime.now(UTC))
    )
    quiet = during(Searching(searcher, texts, args.users), None, args.seconds)
    embedder = settings_models(settings)(NEW).embedder
    timing: dict[str, float] = {}

    def rebuild() -> None:
        started = time.perf_counter()
        reembed(store.client, settings.es, NEW, embedder)
        timing["s"] = time.perf_counter() - started

    busy = during(Searching(searcher, texts, args.users), threading.Thread(target=rebuild), 0)
    print(f"re-embedded {args.memories} memories onto {NEW.describe()} in {timing['s']:.1f} s: "
          f"{args.memories / timing['s']:.1f} memories/s")  # fmt: skip
    print(f"searcher quiet:  {percentiles(quiet.latencies)}, {len(quiet.failures)} failed")
    print(f"searcher during: {percentiles(busy.latencies)}, {len(busy.failures)} failed")
    for failure in busy.failures[:3]:
        print(f"  {failure}")


if __name__ == "__main__":
    main()
