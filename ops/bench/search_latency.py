"""Search latency as the store grows: memq's hybrid search, mem0's `Memory.search` and a bare
Elasticsearch kNN request (the floor), at 1k, 10k and 100k memories of ONE scope (one user).

The memories are synthetic: a pool of about 3,000 distinct sentences built from templates (a
person, an activity, a place, a companion, a month) is embedded once with memq's local MiniLM;
each memory is 2 or 3 pool sentences about the same person, its text their concatenation and its
vector the L2-normalized sum of their vectors. The memories are written straight into each
system's own index with bulk requests, in each system's own document shape: memq's `MemoryDoc`
(lemmas, hash, uuid5 id; each a turn of a synthetic 10-turn conversation, so that memq's search
fetches the reply to its best hit) plus one entity document per person, place and date found by
memq's own extractor, linked to the memories that mention it; mem0's payload as its `insert`
writes it (the first memory goes through `Memory.add(..., infer=False)` so mem0 creates its
index itself; the others copy that document's shape). The stores grow 1k -> 10k -> 100k; at each
size, after one refresh and a few warm-up queries, the same 200 template questions are asked of
the three systems, interleaved per question (A B C, B C A, C A B). memq and the floor embed in
process, mem0 through mem0_compare's in-process OpenAI-compatible endpoint; the floor's time
includes its embedding. Needs the stack (Elasticsearch); writes docs/img/search_latency.png.

    .venv/bin/python ops/bench/search_latency.py [--sizes 1000,10000,100000] [--keep]
        [--without-hop] [--without-reply] [--without-newer-first] [--concurrency 8,32]

With ``--concurrency``, each size is also measured under load: for each level N, each system in
turn (the order rotated per level) is asked the questions by N threads at once, every question
twice, and the latency of each search and the searches per second are reported. All three run in
this one process, so their Python work shares one interpreter lock, as it does for mem0 in an
application; memq's API spreads the same work over its server processes instead.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchlib.mem0 import Endpoints
from benchlib.search import (
    SEED,
    TOP_K,
    Search,
    arguments,
    opened,
    prepare,
    pyplot,
    questions,
    sample,
    save,
)
from benchlib.stats import percentile

QUESTIONS = 200
PLOT = Path(__file__).resolve().parents[2] / "docs/img/search_latency.png"

# --- the three searches ----------------------------------------------------------------------


@dataclass(frozen=True)
class Loaded:
    """One system under N concurrent searchers: each search's ms and the searches per second."""

    latencies: list[float]
    per_second: float


def timed(search: Search, query: str) -> float:
    started = time.perf_counter()
    search(query)
    return (time.perf_counter() - started) * 1000


def loaded(search: Search, asked: list[str], threads: int) -> Loaded:
    """``asked`` twice over, by ``threads`` searchers at once."""
    queries = asked * 2
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda q: timed(search, q), asked[: threads * 2]))  # warm each thread
        started = time.perf_counter()
        latencies = list(pool.map(lambda q: timed(search, q), queries))
        elapsed = time.perf_counter() - started
    return Loaded(latencies, len(queries) / elapsed)


def under_load(
    searches: dict[str, Search], asked: list[str], levels: Sequence[int]
) -> dict[int, dict[str, Loaded]]:
    """For each level, every system under that many searchers, one after another, the order
    rotated from level to level."""
    systems = list(searches)
    found: dict[int, dict[str, Loaded]] = {}
    for i, level in enumerate(levels):
        shift = i % len(systems)
        order = systems[shift:] + systems[:shift]
        found[level] = {s: loaded(searches[s], asked, level) for s in order}
    return found


# --- report ----------------------------------------------------------------------------------

Results = dict[int, dict[str, list[float]]]
LoadResults = dict[int, dict[int, dict[str, Loaded]]]


def load_table(results: LoadResults) -> str:
    lines = [
        "| memories | searchers | system | p50 ms | p95 ms | searches/s | p95 / mem0 p95 |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, by_level in results.items():
        for level, by_system in by_level.items():
            mem0_p95 = percentile(by_system["mem0"].latencies, 95)
            for system in sorted(by_system):
                got = by_system[system]
                p50, p95 = (percentile(got.latencies, p) for p in (50, 95))
                lines.append(
                    f"| {size:,} | {level} | {system} | {p50:.1f} | {p95:.1f} "
                    f"| {got.per_second:.1f} | {p95 / mem0_p95:.2f} |"
                )
    return "\n".join(lines)


def table(results: Results) -> str:
    lines = [
        "| memories | system | p50 ms | p95 ms | p99 ms | p50 / floor p50 |",
        "|---|---|---|---|---|---|",
    ]
    for size, by_system in results.items():
        floor = percentile(by_system["floor"], 50)
        for system, values in by_system.items():
            p50, p95, p99 = (percentile(values, p) for p in (50, 95, 99))
            lines.append(
                f"| {size:,} | {system} | {p50:.1f} | {p95:.1f} | {p99:.1f} | {p50 / floor:.2f} |"
            )
    return "\n".join(lines)


def plot(results: Results, path: Path) -> None:
    sizes = list(results)
    figure, axes = pyplot().subplots(figsize=(7, 4.5))
    for system, color in (("memq", "tab:blue"), ("mem0", "tab:orange"), ("floor", "tab:gray")):
        for p, style in ((50, "-"), (95, "--")):
            values = [percentile(results[s][system], p) for s in sizes]
            axes.plot(sizes, values, style, marker="o", color=color, label=f"{system} p{p}")
    axes.set_xscale("log")
    axes.set_xlabel("memories in the scope (one user)")
    axes.set_ylabel("search latency, ms")
    axes.set_title("Search latency as the store grows (top 10, single client)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(ncol=3, fontsize=8)
    save(figure, path)


# --- the run ---------------------------------------------------------------------------------


def run(
    sizes: list[int],
    keep: bool,
    workdir: Path,
    *,
    without_hop: bool = False,
    without_reply: bool = False,
    without_newer_first: bool = False,
    levels: Sequence[int] = (),
    loads: LoadResults | None = None,
) -> Results:
    rng = random.Random(SEED)
    bench = prepare(rng, max(sizes))
    bench.without_hop, bench.without_reply = without_hop, without_reply
    bench.without_newer_first = without_newer_first
    asked = questions(rng, QUESTIONS)
    results: Results = {}
    with opened(bench, Endpoints(bench.embedder, turns=0), workdir, keep):
        previous = 0
        for size in sizes:
            bench.grow(previous, size)
            results[size] = sample(bench.searches(), asked)
            print(table({size: results[size]}), flush=True)
            if levels and loads is not None:
                loads[size] = under_load(bench.searches(), asked, levels)
                print(load_table({size: loads[size]}), flush=True)
            previous = size
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = arguments(__doc__, PLOT)
    parser.add_argument(
        "--without-hop",
        action="store_true",
        help="also time memq with each query asking for no second hop (hop=false)",
    )
    parser.add_argument(
        "--without-reply",
        action="store_true",
        help="also time memq with each query asking for no reply to its best hit (reply=false)",
    )
    parser.add_argument(
        "--without-newer-first",
        action="store_true",
        help="also time memq with the newer-first rule off (MEMQ_SEARCH_RIVAL_SCORE_RATIO=1)",
    )
    parser.add_argument(
        "--concurrency",
        default="",
        help="also measure each size under this many concurrent searchers, comma-separated",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    levels = [int(n) for n in args.concurrency.split(",") if n]
    loads: LoadResults = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mem0bench-") as workdir:
        os.environ["MEM0_TELEMETRY"] = "False"  # both read when mem0 is first imported
        os.environ["MEM0_DIR"] = workdir
        results = run(
            sizes,
            args.keep,
            Path(workdir),
            without_hop=args.without_hop,
            without_reply=args.without_reply,
            without_newer_first=args.without_newer_first,
            levels=levels,
            loads=loads,
        )
    print(f"\n{QUESTIONS} questions, top {TOP_K}, one scope, interleaved per question")
    print(table(results))
    if loads:
        print("\nunder load: every question twice, by N searchers at once, one system at a time")
        print(load_table(loads))
    plot(results, args.plot)
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
