"""Ingestion cost, memq against mem0 OSS (mem0ai 2.2.1), LLM extraction on for both.

Same machine, same Elasticsearch node (separate indices), the same embedder and the same model:
- embeddings: memq's local MiniLM served from this process as ONE OpenAI-compatible
  `POST /v1/embeddings` (mem0_compare's endpoint), called by memq's workers
  (MEMQ_EMBEDDER_KIND=openai) and by mem0 alike, so calls are counted for both;
- LLM: tests/fakellm's scripted server, answering at once; it tells memq's extraction prompt
  from mem0's additive-extraction prompt by their instructions (both ask for the same
  `{"memory": [{"text", "attributed_to"}]}`) and answers with one fact per user line (at most 3)
  of the new messages;
- Elasticsearch: both through a counting HTTP proxy on 127.0.0.1 (keep-alive upstream), so
  requests are counted for both and the proxy hop is paid by both.

Modes, alternated per round: memq-1w (one `--role io` + one `--role cpu` worker, as ops/ runs
them), mem0-seq (`Memory.add`, one after another), memq-2w (the same plus a second `--role cpu`
worker), mem0-async (`AsyncMemory.add`, asyncio.gather under a semaphore of 8). memq's wall time
runs from the first `intake.submit` to every job record terminal and the memories index
refreshed; mem0's from the first add to the last one returned and its index refreshed. Needs
the stack (ops/up); starts its own workers on private queues and index prefixes.

With ``--baseline DIR`` (a checkout of an earlier memq, e.g. a ``git worktree`` of another
commit), a "baseline-1w" mode runs that code in the same run: its workers and its intake run in
processes started in DIR with DIR first on PYTHONPATH (same virtualenv, same services, same
counters), the intake process importing everything before the clock starts.

With ``--model realistic`` the scripted model behaves as a hosted one under load (its
``Provider``): each answer takes a lognormal time, median 1 s and p95 3 s (mean 1.25 s), and
a request beyond 16 in flight is answered 429 with ``Retry-After: 1``. The provider's ceiling is
then 16 / 1.25 s = 12.8 conversations/s; mem0-async runs under a semaphore of 16, and what mem0
raises to its caller is counted per exception type. Every mode of a round draws the same
latencies in the same order (the model's generator is seeded with the round's number before
each run), so the spread between modes of one round is theirs, not the draws'. ``--via api``
POSTs memq's conversations to a memq API process (8 clients at once, as a chat platform's
webhooks would) instead of calling ``intake.submit`` in this process: the users' path, API hop
included.

    .venv/bin/python ops/bench/ingest_compare.py [--conversations 200] [--users 20] [--rounds 1]
        [--baseline DIR] [--model instant|realistic] [--via intake|api]
        [--modes memq-1w,mem0-seq,memq-2w,mem0-async]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from benchlib.bounds import order_bound
from benchlib.ingest import (
    REALISTIC,
    Bench,
    Result,
    baseline_run,
    mem0_async_run,
    mem0_seq_run,
    memq_run,
    running_bench,
    same_draws,
    table,
)

# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument(
        "--users",
        type=int,
        default=20,
        help="the conversations are spread over this many users, whose own ones run in order",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", type=Path, help="source tree of an earlier memq to compare")
    parser.add_argument(
        "--model",
        choices=("instant", "realistic"),
        default="instant",
        help="realistic: answers take lognormal time (median 1 s, p95 3 s), and more than 16 "
        "requests in flight are answered 429 with Retry-After: 1; mem0-async then runs 16 at once",
    )
    parser.add_argument(
        "--via",
        choices=("intake", "api"),
        default="intake",
        help="api: memq's conversations are POSTed to a memq API process (8 clients at once)",
    )
    parser.add_argument(
        "--modes",
        default="memq-1w,mem0-seq,memq-2w,mem0-async",
        help="comma-separated subset of memq-1w, memq-2w, mem0-seq, mem0-async (in this order)",
    )
    return parser.parse_args(argv)


def run_rounds(
    bench: Bench, rounds: int, baseline: Path | None = None, chosen: str | None = None
) -> list[Result]:
    every: dict[str, Callable[[], Result]] = {
        "memq-1w": lambda: memq_run(bench, 1),
        "mem0-seq": lambda: mem0_seq_run(bench),
        "memq-2w": lambda: memq_run(bench, 2),
        "mem0-async": lambda: mem0_async_run(bench),
    }
    names = (chosen or ",".join(every)).split(",")
    unknown = sorted(set(names) - set(every))
    if unknown:
        raise SystemExit(f"ingest_compare: unknown modes {unknown}; choose from {sorted(every)}")
    modes = [every[name] for name in names]
    if baseline is not None:
        modes.insert(1, lambda: baseline_run(bench, baseline))
    results = []
    for round_no in range(1, rounds + 1):
        for mode in modes:
            same_draws(bench, round_no)
            work = bench.embed_work()
            result = mode()
            print(f"round {round_no}: {result}")
            print(f"  embedding: {embedding_work(work, bench.embed_work())}")
            print(f"  LLM prompts seen so far: {dict(bench.responder.kinds)}")
            results.append(result)
    return results


def embedding_work(before: dict[str, float], after: dict[str, float]) -> str:
    """What the embeddings endpoint did between two readings of its counters."""
    texts = after["embed_texts"] - before["embed_texts"]
    chars = after["embed_chars"] - before["embed_chars"]
    cpu = after["process_cpu_seconds"] - before["process_cpu_seconds"]
    return f"{texts:.0f} texts, {chars:.0f} characters, {cpu:.1f} CPU seconds to embed them"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # One Celery app per memq run in this process, each registering the same task names; they
    # only send tasks (by name, to the run's queues), so the first registration is harmless.
    warnings.filterwarnings("ignore", message="Task name 'memq\\.")
    realistic = args.model == "realistic"
    with running_bench(
        args.conversations,
        "ingestbench-",
        via_api=args.via == "api",
        users=args.users,
        mem0_concurrency=16 if realistic else 8,
    ) as bench:
        if realistic:
            bench.llm.provider = REALISTIC
        results = run_rounds(bench, args.rounds, args.baseline, args.modes)
        convs = bench.convs
    print(table(results, args.conversations))
    if realistic:
        print(order_bound(convs, REALISTIC))
    return 0


if __name__ == "__main__":
    sys.exit(main())
