"""Evidence recall on the LoCoMo dev subset: BM25 only, vectors only, and hybrid, side by side.

Every turn ("Speaker: text", as a chat log reads) is ingested through memq's own phases with
infer=False (one memory per turn, its dia_id in metadata, the session date as observation time)
into a private index prefix of the running Elasticsearch; then every question searches its
conversation's scope, and we check whether the evidence turns are in the top k. Reported per
category and overall (categories 1-4): all@5, all@10 (every evidence turn retrieved) and any@10
(at least one).

    .venv/bin/python ops/bench/locomo_recall.py [--data ../shared/data/locomo-dev] [--keep]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.deps import Deps
from pipeline.memory import Memory
from pipeline.models import AddRequest, MessageIn, Role, Scope
from pipeline.search import Searcher, SearchQuery
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames, drop_indices, ensure_indices
from workers.runtime import Runtime

MODES = {
    "bm25": {"weight_semantic": 0.0, "weight_bm25": 1.0, "weight_entity": 0.0},
    "vectors": {"weight_semantic": 1.0, "weight_bm25": 0.0, "weight_entity": 0.0},
    "hybrid": {},  # the configured weights
}
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def fresh_runtime(prefix: str) -> Runtime:
    """memq on empty indices under ``prefix``, with the local MiniLM whatever the environment
    says (benchmarks compare like with like)."""
    base = Settings()
    settings = base.model_copy(
        update={
            "es": base.es.model_copy(update={"index_prefix": prefix}),
            "embedder": base.embedder.model_copy(update={"kind": "local"}),
        }
    )
    drop_indices(make_client(settings.es), IndexNames(prefix))
    runtime = Runtime(settings)
    ensure_indices(runtime.es, settings.es, settings.embedder.dims)
    return runtime


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


def ingest(deps: Deps, turns: list[dict[str, Any]]) -> float:
    """One infer=False job per turn through the real phases; returns turns per second."""
    memory = Memory(deps)
    started = time.perf_counter()
    for turn in turns:
        photo = f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else ""
        text = f"{turn['speaker']}: {turn['text']}{photo}"
        request = AddRequest(
            scope=Scope(tenant="locomo", user_id=turn["conv_id"]),
            messages=[MessageIn(role=Role.USER, content=text, name=turn["speaker"])],
            metadata={"dia_id": turn["dia_id"], "session": turn["session_id"]},
            infer=False,
            timestamp=datetime.fromisoformat(turn["session_datetime_iso"]).replace(tzinfo=UTC),
        )
        memory.add(request, job_id=f"locomo-{turn['conv_id']}-{turn['dia_id']}")
    return len(turns) / (time.perf_counter() - started)


def evaluate(searcher: Searcher, questions: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """all@5, all@10, any@10 per category (and 0 = categories 1-4 together)."""
    totals: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    queries = [
        SearchQuery(
            query=q["question"], scope=Scope(tenant="locomo", user_id=q["conv_id"]), top_k=10
        )
        for q in questions
    ]
    for start in range(0, len(queries), 32):
        batch = searcher.search_many(queries[start : start + 32])
        for question, hits in zip(questions[start : start + 32], batch, strict=True):
            found = [h.metadata.get("dia_id") for h in hits]
            evidence = set(question["evidence"])
            scores = {
                "all@5": evidence <= set(found[:5]),
                "all@10": evidence <= set(found[:10]),
                "any@10": bool(evidence & set(found[:10])),
                "n": True,
            }
            for bucket in (question["category"], 0) if question["category"] != 5 else (5,):
                for name, value in scores.items():
                    totals[bucket][name] += float(value)
    return {
        c: {k: (v / t["n"] if k != "n" else v) for k, v in t.items()} for c, t in totals.items()
    }


def table(results: dict[str, dict[int, dict[str, float]]]) -> str:
    header = (
        "| category | n | "
        + " | ".join(f"{m} all@5 | {m} all@10 | {m} any@10" for m in results)
        + " |"
    )
    lines = [header, "|" + "---|" * (2 + 3 * len(results))]
    for category in (1, 2, 3, 4, 5, 0):
        label = "overall (1-4)" if category == 0 else f"{category} {CATEGORIES[category]}"
        first = next(iter(results.values()))
        if category not in first:
            continue
        cells = [
            f"{results[m][category][k]:.3f}" for m in results for k in ("all@5", "all@10", "any@10")
        ]
        lines.append(f"| {label} | {int(first[category]['n'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parents[3] / "shared/data/locomo-dev"
    )
    parser.add_argument("--keep", action="store_true", help="keep the benchmark indices")
    args = parser.parse_args(argv)
    if not (args.data / "turns.jsonl").is_file():
        print(f"locomo_recall: no turns.jsonl under {args.data}", file=sys.stderr)
        return 2
    runtime = fresh_runtime("memqbench-locomo")
    settings = runtime.settings
    turns = read_jsonl(args.data / "turns.jsonl")
    rate = ingest(runtime.deps, turns)
    runtime.es.indices.refresh(index=runtime.store.names.memories)
    questions = read_jsonl(args.data / "qa.jsonl")
    results = {}
    for mode, weights in MODES.items():
        searcher = replace(runtime.searcher, config=settings.search.model_copy(update=weights))
        results[mode] = evaluate(searcher, questions)
    print(f"ingested {len(turns)} turns at {rate:.1f} turns/s (infer=False, in-process phases)")
    config = settings.search
    print(
        f"weights (hybrid): semantic {config.weight_semantic}, bm25 {config.weight_bm25}, "
        f"entity {config.weight_entity}"
    )
    print(table(results))
    if not args.keep:
        drop_indices(runtime.es, runtime.store.names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
