"""memq against mem0 OSS (mem0ai, `mem0.Memory`): evidence recall on LoCoMo dev, side by side,
each through its own public interface.

memq runs as a user runs it: a private stack (its own worker and API, index prefix and queues;
see api_stack.py) gets one `POST /v1/memories` per session (speaker in each message's `name`,
the session date as `timestamp`, infer=false) and one `POST /v1/memories/search` per question.
mem0 gets the same sessions through `Memory.add(messages, user_id=..., infer=False)` (the
messages with their `name`; OSS mem0 refuses `timestamp`, so the date rides in metadata) and
the same questions through `Memory.search`. Both use the same Elasticsearch node and the same
model, all-MiniLM-L6-v2 (memq's `MiniLMEmbedder`; for mem0, served from this process as an
OpenAI-compatible `POST /v1/embeddings` on 127.0.0.1). mem0's LLM points at a stub that counts
its calls (there must be none). Questions are asked of the two systems interleaved (the order
swapped every other question) for the latencies; memq's include the HTTP hop. Hits are matched
to turns by their text and scored with locomo_recall's functions. Needs the stack (ops/up).

    .venv/bin/python ops/bench/mem0_compare.py [--data ../shared/data/locomo-dev] [--keep]
        [--port 8311]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.locomo import (
    Search,
    TurnIndex,
    api_search,
    asked_at,
    evaluate,
    ingest,
    read_jsonl,
    said,
    sessions,
    table,
)
from benchlib.mem0 import MEM0_INDEX, Endpoints, drop_mem0, make_mem0, mem0_config, serve
from benchlib.stack import running_stack
from benchlib.stats import percentile

from pipeline.adapters.embedding.local import MiniLMEmbedder
from pipeline.config import Settings
from pipeline.store.client import make_client

MEMQ_PREFIX = "memqbench-mem0cmp"
TOP_K = 10


# --- mem0 ------------------------------------------------------------------------------------


def mem0_ingest(memory: Any, turns: list[dict[str, Any]]) -> float:
    """One `Memory.add(..., infer=False)` per session, the same messages as memq's; OSS mem0
    refuses `timestamp` (platform only), so the session date rides in metadata."""
    started = time.perf_counter()
    for session in sessions(turns):
        first = session[0]
        messages = [{"role": "user", "content": said(t), "name": t["speaker"]} for t in session]
        metadata = {
            "session": first["session_id"],
            "session_date": first["session_datetime_iso"],
        }
        memory.add(messages, user_id=first["conv_id"], metadata=metadata, infer=False)
    return len(turns) / (time.perf_counter() - started)


# --- interleaved search ----------------------------------------------------------------------


@dataclass
class Run:
    """Memory texts found per question (by ``qa_id``) and per-query latencies (ms)."""

    search: Search
    hits: dict[str, list[str]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    def ask(self, question: dict[str, Any]) -> None:
        started = time.perf_counter()
        found = self.search(question)
        self.latencies.append((time.perf_counter() - started) * 1000)
        self.hits[question["qa_id"]] = found


def mem0_search(memory: Any) -> Search:
    def search(question: dict[str, Any]) -> list[str]:
        reply = memory.search(
            question["question"], top_k=TOP_K, filters={"user_id": question["conv_id"]}
        )
        return [str(item.get("memory", "")) for item in reply["results"]]

    return search


def interleave(runs: list[Run], questions: list[dict[str, Any]]) -> None:
    """A B, then B A, per question; one untimed warm-up search each first."""
    for run in runs:
        run.search(questions[0])
    for i, question in enumerate(questions):
        for run in runs if i % 2 == 0 else runs[::-1]:
            run.ask(question)


# --- report ----------------------------------------------------------------------------------


def timing_table(turns: int, ingest_rates: dict[str, float], runs: dict[str, Run]) -> str:
    lines = [
        "| system | ingest s | ingest turns/s | search p50 ms | search p95 ms |",
        "|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        rate = ingest_rates[name]
        lines.append(
            f"| {name} | {turns / rate:.1f} | {rate:.1f} | "
            f"{percentile(run.latencies, 50):.1f} | {percentile(run.latencies, 95):.1f} |"
        )
    return "\n".join(lines)


def report(
    questions: list[dict[str, Any]],
    index: TurnIndex,
    rates: dict[str, float],
    runs: dict[str, Run],
    stub: Endpoints,
) -> None:
    print(table({name: evaluate(run.hits, questions, index) for name, run in runs.items()}))
    print()
    print(timing_table(turns=stub.turns, ingest_rates=rates, runs=runs))
    inside = stub.embed_seconds / max(stub.embed_calls, 1) * 1000
    print(
        f"\nmem0's embeddings endpoint: {stub.embed_calls} calls, {inside:.1f} ms each inside "
        f"the model on average. LLM stub calls: {stub.llm_calls}."
    )


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parents[3] / "shared/data/locomo-dev"
    )
    parser.add_argument("--keep", action="store_true", help="keep both systems' indices")
    parser.add_argument("--port", type=int, default=8311, help="memq's private API port")
    return parser.parse_args(argv)


def compare(data: Path, keep: bool, port: int, workdir: Path) -> None:
    turns = read_jsonl(data / "turns.jsonl")
    questions = read_jsonl(data / "qa.jsonl")
    settings = Settings()
    stub = Endpoints(
        MiniLMEmbedder(settings.embedder.model_copy(update={"kind": "local"})), len(turns)
    )
    server = serve(stub)
    es = make_client(settings.es)
    drop_mem0(es)
    memory = make_mem0(mem0_config(settings.es.url, server.server_port, workdir), es)
    with (
        running_stack(MEMQ_PREFIX, port, workdir / "logs", keep=keep) as stack,
        stack.client() as client,
    ):
        rates = {"memq": ingest(client, turns), "mem0": mem0_ingest(memory, turns)}
        es.indices.refresh(index=MEM0_INDEX)
        runs = {
            "memq": Run(api_search(client, asked_at(turns))),
            "mem0": Run(mem0_search(memory)),
        }
        interleave(list(runs.values()), questions)
    print(f"{len(turns)} turns, {len(questions)} questions, top {TOP_K}, infer=False for both")
    report(questions, TurnIndex(turns), rates, runs, stub)
    memory.close()
    server.shutdown()
    if not keep:
        drop_mem0(es)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.data / "turns.jsonl").is_file():
        print(f"mem0_compare: no turns.jsonl under {args.data}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mem0bench-") as workdir:
        os.environ["MEM0_TELEMETRY"] = "False"  # both read when mem0 is imported, in make_mem0
        os.environ["MEM0_DIR"] = workdir
        compare(args.data, args.keep, args.port, Path(workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
