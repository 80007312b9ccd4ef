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
import asyncio
import heapq
import json
import random
import statistics
import subprocess
import sys
import uuid
import warnings
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

from benchlib.conversations import Conversation
from benchlib.ingest import (
    REALISTIC,
    Bench,
    Result,
    drop_mem0_indices,
    drop_replica,
    measure,
    mem0_args,
    mem0_finish,
    mem0_memory,
    mem0_seq,
    mem0_setup,
    memq_app,
    memq_run,
    request_for,
    running_bench,
    same_draws,
    stored,
    table,
    wait_terminal,
)
from benchlib.model import Provider

from pipeline.store.indices import IndexNames

# --- conversations ---------------------------------------------------------------------------


# --- the scripted LLM: one responder for both systems' prompts -------------------------------


# --- the counting Elasticsearch proxy --------------------------------------------------------


# --- shared bench context and results --------------------------------------------------------


# --- memq ------------------------------------------------------------------------------------


BASELINE_INTAKE = """
import json, sys
from pipeline.config import Settings
from pipeline.models import AddRequest
from workers.app import create_celery
from workers.intake import submit
app = create_celery(Settings())
requests = [AddRequest.model_validate(r) for r in json.loads(sys.stdin.readline())]
app.runtime.store
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps([submit(app, request).record.job_id for request in requests]), flush=True)
"""


def baseline_run(bench: Bench, baseline: Path) -> Result:
    """The same work for the code in ``baseline``: its workers, and its intake in a process
    of its own (everything imported and connected before the clock starts)."""
    with memq_app(bench, 1, baseline=baseline) as app:
        names = IndexNames(app.runtime.settings.es.index_prefix)  # created by the intake below
        env = app.conf.memq_bench_env
        intake = subprocess.Popen(
            [sys.executable, "-c", BASELINE_INTAKE],
            env=env,
            cwd=baseline,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert intake.stdin is not None and intake.stdout is not None
        requests = [request_for(conv).model_dump(mode="json") for conv in bench.convs]
        intake.stdin.write(json.dumps(requests) + "\n")
        intake.stdin.flush()
        if intake.stdout.readline().strip() != "ready":
            raise SystemExit("ingest_compare: the baseline intake did not start")
        before = stored(bench.es, names.memories)

        def work() -> tuple[int, int]:
            assert intake.stdin is not None and intake.stdout is not None
            intake.stdin.write("go\n")
            intake.stdin.flush()
            jobs = json.loads(intake.stdout.readline())
            failed = wait_terminal(bench.es, names, jobs, timeout_s=900)
            bench.es.indices.refresh(index=names.memories)
            return stored(bench.es, names.memories) - before, failed

        result = measure(bench, "baseline-1w", work)
        intake.wait(timeout=60)
        return result


# --- mem0 ------------------------------------------------------------------------------------


def mem0_seq_run(bench: Bench) -> Result:
    with mem0_memory(bench) as (memory, index):
        return mem0_seq(bench, memory, index)


def mem0_async_run(bench: Bench) -> Result:
    from mem0 import AsyncMemory  # type: ignore[import-untyped]

    config, index = mem0_setup(bench, uuid.uuid4().hex[:6])
    memory = AsyncMemory.from_config(config)
    drop_replica(bench, index)

    async def add_all() -> int:
        gate = asyncio.Semaphore(bench.mem0_concurrency)

        async def add(conv: Conversation) -> int:
            async with gate:
                try:
                    return len((await memory.add(**mem0_args(conv)))["results"])
                except Exception as exc:  # what mem0 raises to its caller is part of the result
                    errors[type(exc).__name__] += 1
                    return 0

        return sum(await asyncio.gather(*(add(conv) for conv in bench.convs)))

    errors: Counter[str] = Counter()

    def work() -> tuple[int, int]:
        return mem0_finish(bench, index, asyncio.run(add_all()), 0, errors)

    try:
        return measure(bench, "mem0-async", work)
    finally:
        memory.close()
        drop_mem0_indices(bench.es, index)


# --- report ----------------------------------------------------------------------------------


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


def order_bound(convs: list[Conversation], model: Provider, trials: int = 2_000) -> str:
    """The best a client can do on these conversations under ``model``, whatever its own costs,
    by simulation of the model's latencies (their expected value over ``trials`` draws):
    - session order alone: the run lasts at least as long as its longest user's chain of
      model calls, one after another (the provider's in-flight limit ignored);
    - session order and the provider's limit together: a client that starts a call the moment
      a slot is free and a user's next conversation may start (first ready, first served, the
      latencies unknown in advance) and spends no time of its own between calls.
    The provider's ceiling, ``limit / mean``, is a rate over a long run: a finite run also
    waits for its last calls, so even the second bound lies below it."""
    rng = random.Random(model.seed)
    per_user = Counter(conv.user for conv in convs)
    chains = list(per_user.values())
    longest = statistics.fmean(
        max(sum(model.latency(rng) for _ in range(n)) for n in chains) for _ in range(trials)
    )
    served = statistics.fmean(limited_run(chains, model, rng) for _ in range(trials))
    count, ceiling = len(convs), model.ceiling
    return (
        f"session order: {len(per_user)} users, at most {max(chains)} conversations each, run "
        f"in order; the longest user's chain of model calls lasts {longest:.1f} s on average, so "
        f"at most {count / longest:.2f} conversations/s ({count / longest / ceiling:.0%} of the "
        f"provider's ceiling, {ceiling:.1f}/s); with at most {model.limit} calls in flight "
        f"besides, a client with no costs of its own takes {served:.1f} s: at most "
        f"{count / served:.2f} conversations/s ({count / served / ceiling:.0%} of the ceiling)"
    )


def limited_run(chains: list[int], model: Provider, rng: random.Random) -> float:
    """One draw of how long users with ``chains`` conversations each take through a provider
    that holds ``model.limit`` calls at once, each user's calls one after another."""
    left = list(chains)
    ready = deque(user for user, n in enumerate(chains) if n)
    ends: list[tuple[float, int]] = []
    now = 0.0
    while ready or ends:
        while ready and len(ends) < model.limit:
            user = ready.popleft()
            left[user] -= 1
            heapq.heappush(ends, (now + model.latency(rng), user))
        now, user = heapq.heappop(ends)
        if left[user]:
            ready.append(user)
    return now


if __name__ == "__main__":
    sys.exit(main())
