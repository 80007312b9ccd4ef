"""Cost curve: how ingestion and search time grow from 1k to 100k memories, memq and mem0 side
by side.

One scope (one user) is grown 1k -> 10k -> 100k memories with search_latency's synthetic fill,
bulk-written into each system's own index in its own document shape. At each size, in turn:

- search: the same `--questions` template questions asked of memq's hybrid `Searcher.search` and
  mem0's `Memory.search` (top 10), interleaved per question after warm-up questions, exactly as
  search_latency measures them; p50 and p95 reported;
- ingestion: `--conversations` new conversations of ingest_compare's generator (4 to 8 turns),
  every one rewritten to belong to that same user (and, for memq, its tenant), ingested with
  LLM extraction on. memq goes through its real path: `workers.intake.submit` to real worker
  processes (one `--role io`, one `--role cpu`, on private queues) that write under the filled
  store's index prefix, into the big scope. mem0 gets `Memory.add(..., infer=True)` one call after
  another, into its filled index. As in ingest_compare, both call the same scripted LLM
  (tests/fakellm, answering at once) and the same in-process MiniLM embeddings endpoint, and
  both reach Elasticsearch through its counting proxy. The systems take turns going first: memq
  at the first size, mem0 at the next, and so on.

All conversations belong to one user, so memq runs them in session order, one job at a time
(each job, as it ends, starts the next); the hand-over is part of memq's figure.
Sequential `Memory.add` is mem0's fair counterpart. Seconds per conversation is the wall time of
the whole batch divided by the number of conversations, for both systems. memq's time runs from
the first `submit` until every job record is terminal and the memories index is refreshed.
mem0's runs from the first `add` until the last one returns and its index is refreshed. memq's
"phases" column is the median, over the batch's jobs, of the job record's own `timings_ms`
summed: time spent inside phases, without the queue hops and the turn waits. Memories ingested
at one size stay in the scope for the next.

Prints a markdown table (and ingest_compare's counts per size and system) and writes a
two-panel plot, search p50 and ingestion seconds per conversation against memories (log x), to
docs/img/cost_curve.png unless --plot says where. Needs the stack (ops/up). Everything it
creates is dropped at the end: indices, its workers' Redis keys and the temporary directory.
With --keep, both systems' indices stay.

    .venv/bin/python ops/bench/cost_curve.py [--sizes 1000,10000,100000] [--conversations 30]
        [--questions 100] [--plot PATH] [--keep]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchlib.conversations import Conversation, conversations
from benchlib.ingest import Bench as IngestBench
from benchlib.ingest import Result, mem0_memory, mem0_seq, memq_app, memq_ingest
from benchlib.ingest import table as counts_table
from benchlib.mem0 import Endpoints
from benchlib.model import ScriptedModel
from benchlib.proxy import CountingProxy
from benchlib.replies import Responder
from benchlib.search import (
    MEM0_INDEX,
    MEMQ_PREFIX,
    SCOPE,
    SEED,
    Search,
    arguments,
    opened,
    prepare,
    pyplot,
    questions,
    sample,
    save,
)
from benchlib.search import Bench as Stores
from benchlib.stats import percentile
from elasticsearch import Elasticsearch

from pipeline.store.indices import IndexNames
from workers.app import MemqCelery

SYSTEMS = ("memq", "mem0")
PLOT = Path(__file__).resolve().parents[2] / "docs/img/cost_curve.png"


def batches(sizes: int, per_size: int) -> list[list[Conversation]]:
    """`per_size` conversations for each size, none repeated, all of the scope's one user."""
    mine = [replace(c, user=str(SCOPE.user_id)) for c in conversations(sizes * per_size, users=1)]
    return [mine[k * per_size : (k + 1) * per_size] for k in range(sizes)]


# --- one size --------------------------------------------------------------------------------


@dataclass
class Row:
    size: int
    search: dict[str, list[float]]  # ms per question, per system
    ingest: dict[str, Result]
    conversations: int
    phases: dict[str, float]  # memq: median ms per phase over the batch's jobs, and "all"

    def p(self, system: str, q: int) -> float:
        return percentile(self.search[system], q)

    def per_conv(self, system: str) -> float:
        return self.ingest[system].seconds / self.conversations


@dataclass
class Curve:
    """The filled stores, both systems' ingestion paths and the questions asked at every size."""

    stores: Stores
    ingest: IngestBench
    app: MemqCelery
    mem0: Any  # mem0's `Memory` on the filled index, through the proxy, with the scripted LLM
    asked: list[str]

    def searches(self) -> dict[str, Search]:
        return {name: s for name, s in self.stores.searches().items() if name in SYSTEMS}

    def ingestions(self, convs: list[Conversation], batch: str) -> dict[str, Callable[[], Result]]:
        bench = replace(self.ingest, convs=convs)
        return {
            "memq": lambda: memq_ingest(bench, self.app, "memq", SCOPE.tenant, batch),
            "mem0": lambda: mem0_seq(bench, self.mem0, MEM0_INDEX),
        }


def job_phases(es: Elasticsearch, names: IndexNames, batch: str, jobs: int) -> dict[str, float]:
    """Median ms per phase over the batch's job records, and of their sums ("all")."""
    hits = es.search(
        index=names.jobs,
        query={"term": {"batch_id": batch}},
        size=jobs,
        source_includes=["timings_ms"],
    ).body["hits"]["hits"]
    timings: list[dict[str, float]] = [h["_source"].get("timings_ms", {}) for h in hits]
    if not timings:
        return {}
    medians = {p: statistics.median(t.get(p, 0.0) for t in timings) for p in timings[0]}
    return {**medians, "all": statistics.median(sum(t.values()) for t in timings)}


def at_size(curve: Curve, turn: int, size: int, convs: list[Conversation]) -> Row:
    """Search, then ingest `convs` into both systems, memq first on even turns."""
    search = sample(curve.searches(), curve.asked)
    batch = f"cost-curve-{size}"
    runs = curve.ingestions(convs, batch)
    order = SYSTEMS if turn % 2 == 0 else SYSTEMS[::-1]
    done = {system: replace(runs[system](), mode=f"{system} @ {size:,}") for system in order}
    for result in done.values():
        print(
            f"  {result.mode}: {result.seconds:.1f} s, {result.memories} memories stored, "
            f"{result.failed} failed, {result.es_requests} Elasticsearch requests"
        )
    phases = job_phases(curve.ingest.es, curve.app.runtime.store.names, batch, len(convs))
    print(
        "  memq phases, median ms per job: " + ", ".join(f"{p} {v:.0f}" for p, v in phases.items())
    )
    return Row(size, search, {s: done[s] for s in SYSTEMS}, len(convs), phases)


# --- the run ---------------------------------------------------------------------------------


@contextmanager
def proxied() -> Iterator[CountingProxy]:
    proxy = CountingProxy()
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield proxy
    finally:
        proxy.shutdown()


def grow(curve: Curve, sizes: list[int], per_size: int) -> list[Row]:
    rows: list[Row] = []
    previous = 0
    for turn, (size, convs) in enumerate(zip(sizes, batches(len(sizes), per_size), strict=True)):
        curve.stores.grow(previous, size)
        rows.append(at_size(curve, turn, size, convs))
        print(table(rows[-1:]), flush=True)
        previous = size
    return rows


def run(args: argparse.Namespace, sizes: list[int], workdir: Path, llm: ScriptedModel) -> list[Row]:
    rng = random.Random(SEED)
    stores = prepare(rng, max(sizes))
    asked = questions(rng, args.questions)
    endpoints = Endpoints(stores.embedder, turns=0)
    responder = Responder()
    llm.responder = responder
    with proxied() as proxy, opened(stores, endpoints, workdir, args.keep) as server:
        ingest = IngestBench(
            convs=[],
            es_url=proxy.url,
            es_requests=proxy.count,
            embed_work=endpoints.stats,
            embed_url=f"http://127.0.0.1:{server.server_port}/v1",
            llm=llm,
            responder=responder,
            es=stores.runtime.es,
            workdir=workdir,
        )
        with memq_app(ingest, 1, MEMQ_PREFIX) as app, mem0_memory(ingest, MEM0_INDEX) as mem0:
            rows = grow(Curve(stores, ingest, app, mem0[0], asked), sizes, args.conversations)
    print(f"LLM prompts seen: {dict(responder.kinds)}")
    return rows


# --- report ----------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    lines = [
        "| memories | memq search p50 / p95 ms | mem0 search p50 / p95 ms | memq s/conv | "
        "mem0 s/conv | memq phases s/job | search p50 memq / mem0 | s/conv memq / mem0 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        search = " | ".join(f"{row.p(s, 50):.1f} / {row.p(s, 95):.1f}" for s in SYSTEMS)
        ingest = " | ".join(f"{row.per_conv(s):.2f}" for s in SYSTEMS)
        phases = row.phases.get("all", math.nan) / 1000
        ratios = (
            row.p("memq", 50) / row.p("mem0", 50),
            row.per_conv("memq") / row.per_conv("mem0"),
        )
        lines.append(
            f"| {row.size:,} | {search} | {ingest} | {phases:.2f} | "
            f"{ratios[0]:.2f} | {ratios[1]:.2f} |"
        )
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    sizes = [row.size for row in rows]
    figure, (search, ingest) = pyplot().subplots(1, 2, figsize=(11, 4.5))
    for system, color in (("memq", "tab:blue"), ("mem0", "tab:orange")):
        p50 = [row.p(system, 50) for row in rows]
        search.plot(sizes, p50, "-", marker="o", color=color, label=system)
        per_conv = [row.per_conv(system) for row in rows]
        ingest.plot(sizes, per_conv, "-", marker="o", color=color, label=system)
    phases = [row.phases.get("all", math.nan) / 1000 for row in rows]
    ingest.plot(sizes, phases, ":", marker="o", color="tab:blue", label="memq inside phases")
    titles = (
        (search, "search p50, ms", "Search (top 10, single client)"),
        (ingest, "seconds per conversation", "Ingestion, LLM extraction on, one user"),
    )
    for axes, ylabel, title in titles:
        axes.set_xscale("log")
        axes.set_ylim(bottom=0)
        axes.set_xlabel("memories in the scope (one user)")
        axes.set_ylabel(ylabel)
        axes.set_title(title)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=8)
    save(figure, path)


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(__doc__, PLOT)
    parser.add_argument(
        "--conversations", type=int, default=30, help="ingested per size, into each system"
    )
    parser.add_argument("--questions", type=int, default=100, help="asked per size")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="costcurve-") as tmp, ScriptedModel() as llm:
        os.environ["MEM0_TELEMETRY"] = "False"  # both read when mem0 is first imported
        os.environ["MEM0_DIR"] = tmp
        rows = run(args, sizes, Path(tmp), llm)
    print(
        f"\n{args.questions} questions per size, top 10, one scope; ingestion: "
        f"{args.conversations} conversations per size and system, s/conv = batch wall time / "
        f"{args.conversations}"
    )
    print(table(rows))
    results = [row.ingest[s] for row in rows for s in SYSTEMS]
    print(counts_table(results, args.conversations))
    plot(rows, args.plot)
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
