"""Evidence recall on the LoCoMo dev subset, measured on the users' path: BM25 only, vectors
only, and hybrid, side by side.

A private memq stack (its own worker and API, index prefix and queues; see api_stack.py) gets
the conversations as a new user would send them: one ``POST /v1/memories`` per session, each
turn a message with its speaker in ``name`` and its text as said (a shared photo is given by
its caption, as the data set describes it), the session date as ``timestamp``, ``infer=false``.
Then each question is one ``POST /v1/memories/search`` (top 10) in its conversation's scope,
and we check whether the evidence turns are among the hits. A hit is matched to its turns by
its text (the memory text is what was said). The three modes are the same memories searched by
an API started with different weights. Reported per category and overall (categories 1-4):
all@5, all@10 (every evidence turn retrieved) and any@10 (at least one).

    .venv/bin/python ops/bench/locomo_recall.py [--data ../shared/data/locomo-dev]
        [--keep] [--reuse]
        [--port 8310] [--modes bm25,vectors,hybrid] [--set MEMQ_SEARCH_X=1 ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib.locomo import (
    Results,
    Search,
    TurnIndex,
    api_search,
    asked_at,
    evaluate,
    ingest,
    read_jsonl,
    sessions,
    table,
)
from benchlib.stack import Stack, running_stack

PREFIX = "memqbench-locomo"
MODES: dict[str, dict[str, str]] = {
    "bm25": {"MEMQ_SEARCH_WEIGHT_SEMANTIC": "0", "MEMQ_SEARCH_WEIGHT_ENTITY": "0"},
    "vectors": {"MEMQ_SEARCH_WEIGHT_BM25": "0", "MEMQ_SEARCH_WEIGHT_ENTITY": "0"},
    "hybrid": {},  # the configured weights
}


"""A question → the memory texts found, best first."""


def ask_all(search: Search, questions: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {q["qa_id"]: search(q) for q in questions}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parents[3] / "shared/data/locomo-dev"
    )
    parser.add_argument("--keep", action="store_true", help="keep the benchmark indices")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="search the indices a --keep run left (same --prefix) instead of ingesting again",
    )
    parser.add_argument("--port", type=int, default=8310, help="the private API's port")
    parser.add_argument("--prefix", default=PREFIX, help="the private index prefix and queues")
    parser.add_argument(
        "--modes",
        default="bm25,vectors,hybrid",
        help="comma-separated; a mode may carry its own settings as LABEL=MODE:NAME=VALUE:... "
        "(e.g. no-time=hybrid:MEMQ_SEARCH_WEIGHT_TIME=0)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="MEMQ_NAME=VALUE",
        help="a setting of the API for every mode (repeatable), e.g. a search option",
    )
    return parser.parse_args(argv)


def mode_settings(spec: str) -> tuple[str, dict[str, str]]:
    """``hybrid`` → (hybrid, its weights); ``label=hybrid:MEMQ_X=1`` → (label, weights + X)."""
    label, _, rest = spec.rpartition("=") if ":" not in spec else spec.partition("=")
    mode, *pairs = (rest or spec).split(":")
    settings = {**MODES[mode], **dict(pair.split("=", 1) for pair in pairs)}
    return (label or mode), settings


@dataclass(frozen=True)
class Dataset:
    turns: list[dict[str, Any]]
    questions: list[dict[str, Any]]

    @classmethod
    def read(cls, data: Path) -> Dataset:
        return cls(read_jsonl(data / "turns.jsonl"), read_jsonl(data / "qa.jsonl"))


def run_modes(
    stack: Stack, modes: list[str], extra: dict[str, str], data: Dataset
) -> dict[str, Results]:
    """Each mode: the API restarted with its settings, every question asked, scored."""
    index, asked = TurnIndex(data.turns), asked_at(data.turns)
    results = {}
    for spec in modes:
        label, settings = mode_settings(spec)
        with stack.api_with({**extra, **settings}) as client:
            answers = ask_all(api_search(client, asked), data.questions)
            results[label] = evaluate(answers, data.questions, index)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.data / "turns.jsonl").is_file():
        print(f"locomo_recall: no turns.jsonl under {args.data}", file=sys.stderr)
        return 2
    extra = dict(item.split("=", 1) for item in args.set)
    data = Dataset.read(args.data)
    turns = data.turns
    logs = Path(tempfile.gettempdir()) / args.prefix  # the processes' logs, kept for a failure
    with running_stack(args.prefix, args.port, logs, keep=args.keep, reuse=args.reuse) as stack:
        rate = 0.0
        if not args.reuse:
            with stack.client() as client:
                rate = ingest(client, turns)
        results = run_modes(stack, args.modes.split(","), extra, data)
    ingested = "reused the kept indices" if args.reuse else f"ingested at {rate:.1f} turns/s"
    print(
        f"{len(turns)} turns in {len(sessions(turns))} sessions, {ingested} "
        f"(POST /v1/memories per session, infer=false); settings: {extra or 'defaults'}"
    )
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
