"""Ingestion throughput under several settings of memq's workers, side by side in one run.

Each variant is a set of ``MEMQ_*`` settings given to memq's processes (one ``--role io`` and
one ``--role cpu`` worker, as ops/ runs them, and the API); memq ingests the same conversations
through its API (``--via api`` of ingest_compare; ``--via intake`` hands them all to the intake
at once) under each, round after round, so the ratios
between variants are what it measures. Variants are separated by ``;``, settings within one by
``,``; an empty variant is memq's defaults.

    .venv/bin/python ops/bench/settings_sweep.py --model realistic --rounds 2 \\
        --variants "MEMQ_WORKER_WAVE_MS=0;MEMQ_WORKER_WAVE_MS=500;MEMQ_WORKER_WAVE_MS=1000"
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings

from benchlib.ingest import REALISTIC, Result, memq_run, running_bench, same_draws


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--model", choices=("instant", "realistic"), default="realistic")
    parser.add_argument(
        "--via",
        choices=("api", "intake"),
        default="api",
        help="intake: every conversation handed to the intake at once (ingest_compare's default)",
    )
    parser.add_argument("--variants", required=True, help="e.g. 'A=1,B=2;A=3' (';' between)")
    return parser.parse_args(argv)


def parse_variants(text: str) -> list[dict[str, str]]:
    variants = []
    for part in text.split(";"):
        settings = {}
        for pair in filter(None, (p.strip() for p in part.split(","))):
            key, sep, value = pair.partition("=")
            if not sep or not key.startswith("MEMQ_"):
                raise SystemExit(f"settings_sweep: '{pair}' is not MEMQ_NAME=value")
            settings[key] = value
        variants.append(settings)
    return variants


def label(settings: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    variants = parse_variants(args.variants)
    warnings.filterwarnings("ignore", message="Task name 'memq\\.")
    results: dict[str, list[Result]] = {label(v): [] for v in variants}
    with running_bench(args.conversations, "sweep-", via_api=args.via == "api") as bench:
        bench.llm.provider = REALISTIC if args.model == "realistic" else None
        for round_no in range(1, args.rounds + 1):
            for settings in variants:
                bench.memq_settings = settings
                same_draws(bench, round_no)
                result = memq_run(bench, 1)
                results[label(settings)].append(result)
                rate = args.conversations / result.seconds
                print(f"round {round_no}, {label(settings)}: {rate:.2f} conv/s {result}")
    n = args.conversations
    print(
        f"| {args.model} model, memq-1w via the {args.via} | runs | conversations/s (median) | "
        "embedding calls/conv | ES requests/conv | failed | 429s |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        rate = statistics.median(n / r.seconds for r in runs)
        embeds = statistics.mean(r.embed_calls for r in runs) / n
        requests = statistics.mean(r.es_requests for r in runs) / n
        failed = sum(r.failed for r in runs)
        refused = sum(r.refused for r in runs)
        print(
            f"| {name} | {len(runs)} | {rate:.2f} | {embeds:.2f} | {requests:.2f} | "
            f"{failed} | {refused} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
