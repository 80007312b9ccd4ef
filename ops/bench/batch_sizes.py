"""Ingestion throughput against the micro-batch size, with the instant and the realistic model.

For each model (ingest_compare's scripted one answering at once, and its ``Provider``:
lognormal latency, median 1 s, p95 3 s, 429 beyond 16 in flight) and each
``MEMQ_WORKER_BATCH_MAX_JOBS`` given, memq ingests the same conversations with the workers ops/
runs (one ``--role io`` + one ``--role cpu``), POSTed through its API (``--via api`` of
ingest_compare), and the conversations/s are reported in a table and drawn in a PNG. Every size
of one model runs in the same process run, so the ratios between sizes are what it measures.

    .venv/bin/python ops/bench/batch_sizes.py [--conversations 100] [--sizes 1,4,16,32,64]
        [--models instant,realistic] [--plot docs/img/batch-sizes.png]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from benchlib.ingest import REALISTIC, Bench, Result, memq_run, running_bench, same_draws


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--sizes", default="1,4,16,32,64")
    parser.add_argument("--models", default="instant,realistic")
    parser.add_argument("--plot", type=Path, help="write the curves to this PNG")
    return parser.parse_args(argv)


def sweep(bench: Bench, sizes: list[int]) -> dict[int, Result]:
    results = {}
    for size in sizes:
        bench.memq_settings = {"MEMQ_WORKER_BATCH_MAX_JOBS": str(size)}
        same_draws(bench, 1)
        results[size] = memq_run(bench, 1)
        print(f"  batch size {size}: {results[size]}", flush=True)
    return results


def plot(curves: dict[str, dict[int, Result]], conversations: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.2))
    for model, results in curves.items():
        sizes = sorted(results)
        rates = [conversations / results[size].seconds for size in sizes]
        axes.plot(sizes, rates, marker="o", label=f"{model} model")
    if "realistic" in curves:
        ceiling = REALISTIC.limit / 1.25
        axes.axhline(ceiling, linestyle="--", color="grey", label="provider ceiling (16 / 1.25 s)")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("MEMQ_WORKER_BATCH_MAX_JOBS")
    axes.set_ylabel("conversations/s (through the API)")
    axes.set_title(f"memq ingestion, {conversations} conversations, 1 io + 1 cpu worker")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    models = args.models.split(",")
    warnings.filterwarnings("ignore", message="Task name 'memq\\.")
    curves: dict[str, dict[int, Result]] = {}
    with running_bench(args.conversations, "batchsizes-", via_api=True) as bench:
        for model in models:
            print(f"{model} model", flush=True)
            bench.llm.provider = REALISTIC if model == "realistic" else None
            curves[model] = sweep(bench, sizes)
    print("| model | " + " | ".join(f"batch {size}" for size in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for model, results in curves.items():
        cells = " | ".join(
            f"{args.conversations / results[size].seconds:.2f} conv/s "
            f"({results[size].failed} failed, {results[size].refused} 429s)"
            for size in sizes
        )
        print(f"| {model} | {cells} |")
    if args.plot is not None:
        plot(curves, args.conversations, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
