"""``memq reprocess --reextract`` throughput beside backfill's, on the same conversations, and
what a searcher meanwhile sees.

Under a private index prefix and private queues, with its own two workers (one I/O, one CPU,
as ``ops/`` runs them):
1. backfill: ``--conversations`` synthetic conversations (three turns each, over 20 users; the
   archive of ``backfill_throughput.py``) through ``memq backfill``, extracted by one scripted
   model: conversations and memories a second until every job has ended;
2. quiet: one thread searches for ``--seconds`` seconds, in process (``Searcher``, the query
   embedded by the local MiniLM as the API would), before anything else runs;
3. re-extraction: ``memq reprocess --reextract`` (a subprocess, the users' command) replays
   every job with a second scripted model while the same thread keeps searching, until the
   swap: jobs and memories a second, and the searcher's p50/p95 during it.

Both models answer at once, so the figures are memq's own work, not a provider's latency.
Needs the stack of ``ops/up``.

    .venv/bin/python ops/bench/reextract.py [--conversations 300] [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib.model import ScriptedModel
from benchlib.replies import facts_reply
from benchlib.searching import Searching, during
from benchlib.stats import percentiles
from benchlib.workers import backfill, count, start_workers, synthetic_archive

from pipeline.config import Settings
from pipeline.domain.models import Scope
from pipeline.services import build_deps, make_searcher
from pipeline.store.client import make_client
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames, drop_indices

ROOT = Path(__file__).resolve().parents[2]

TENANT = "default"  # backfill's


def new_words(request: dict[str, Any]) -> str:
    """The second model: the same facts, worded anew."""
    reply = json.loads(facts_reply(request))
    for fact in reply["memory"]:
        fact["text"] = fact["text"].replace("The user said:", "Now:")
    return json.dumps(reply)


class UserSearching(Searching):
    """``Searching`` over the backfilled users (``{prefix}-u{n}``) of the default tenant."""

    def __init__(self, searcher: Any, texts: list[str], prefix: str) -> None:
        super().__init__(searcher, texts, 20)
        self.prefix = prefix

    def scope(self, n: int) -> Scope:
        return Scope(tenant=TENANT, user_id=f"{self.prefix}-u{n % 20}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    run = uuid.uuid4().hex[:6]
    prefix = f"memqbench-reextract-{run}"
    with (
        ScriptedModel() as old,
        ScriptedModel() as new,
        tempfile.TemporaryDirectory() as tmp,
    ):
        old.responder, new.responder = facts_reply, new_words
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "MEMQ_ES_INDEX_PREFIX": prefix,
            "MEMQ_LLM_BASE_URL": old.base_url,
            "MEMQ_LLM_MODEL": "old-model",
            **{f"MEMQ_QUEUES_{q.upper()}": f"bench-{run}.{q}" for q in ("io", "cpu", "backfill")},
        }
        workers = start_workers(env, Path(tmp), ROOT)
        try:
            measure(env, Path(tmp), prefix, args, new)
        finally:
            for worker in workers:
                os.killpg(worker.pid, signal.SIGTERM)
                worker.wait(timeout=60)
            client = make_client(Settings().es)
            drop_indices(client, IndexNames(prefix))
            for index in client.indices.get(index=f"{prefix}-*").body:
                client.indices.delete(index=index)


def measure(
    env: dict[str, str], tmp: Path, prefix: str, args: argparse.Namespace, new: ScriptedModel
) -> None:
    archive = tmp / "synthetic.jsonl"
    synthetic_archive(archive, args.conversations, prefix)
    backfill_s = backfill(env, archive, "memq-jsonl", True, tmp / "checkpoint", cwd=ROOT)
    jobs, memories = count(env, prefix)

    base = Settings()
    settings = base.model_copy(update={"es": base.es.model_copy(update={"index_prefix": prefix})})
    store = ElasticStore(make_client(settings.es), IndexNames(prefix))
    searcher = make_searcher(
        settings, store, build_deps(settings, store, lambda: datetime.now(UTC))
    )
    texts = [f"What does the user do near Lisbon? ({n})" for n in range(50)]
    quiet = UserSearching(searcher, texts, prefix)
    during(quiet, None, args.seconds)

    command = [sys.executable, "-m", "memq.cli", "reprocess", "--reextract"]
    rx_env = {**env, "MEMQ_LLM_BASE_URL": new.base_url, "MEMQ_LLM_MODEL": "new-model"}
    result: dict[str, Any] = {}

    def reextract() -> None:
        started = time.perf_counter()
        done = subprocess.run(
            command, env=rx_env, cwd=ROOT, capture_output=True, text=True, check=False
        )
        result["s"], result["done"] = time.perf_counter() - started, done

    busy = UserSearching(searcher, texts, prefix)
    during(busy, threading.Thread(target=reextract), 0)
    done: subprocess.CompletedProcess[str] = result["done"]
    if done.returncode != 0:
        raise SystemExit(f"reprocess failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = done.stderr.strip().splitlines()[-1]
    replayed, made = (
        int(n) for n in re.findall(r"re-extracted (\d+) jobs.* into (\d+) mem", summary)[0]
    )
    rx_s = result["s"]
    print(f"reprocess said: {summary}")
    print("| run | jobs | memories | seconds | jobs/s | memories/s |")
    print("|---|---|---|---|---|---|")
    print(f"| backfill (workers) | {jobs} | {memories} | {backfill_s:.1f} | "
          f"{jobs / backfill_s:.1f} | {memories / backfill_s:.1f} |")  # fmt: skip
    print(f"| reprocess --reextract | {replayed} | {made} | {rx_s:.1f} | "
          f"{replayed / rx_s:.1f} | {made / rx_s:.1f} |")  # fmt: skip
    print(f"re-extraction / backfill, jobs a second: {(replayed / rx_s) / (jobs / backfill_s):.2f}")
    print(f"searcher quiet:  {percentiles(quiet.latencies)}, {len(quiet.failures)} failed")
    print(f"searcher during: {percentiles(busy.latencies)}, {len(busy.failures)} failed")
    for failure in busy.failures[:3]:
        print(f"  {failure}")


if __name__ == "__main__":
    main()
