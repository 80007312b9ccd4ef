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
import json
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import groupby
from pathlib import Path
from typing import Any

from api_stack import Stack, running_stack

from memq.client import Client
from pipeline.jobs import JobStatus

PREFIX = "memqbench-locomo"
MODES: dict[str, dict[str, str]] = {
    "bm25": {"MEMQ_SEARCH_WEIGHT_SEMANTIC": "0", "MEMQ_SEARCH_WEIGHT_ENTITY": "0"},
    "vectors": {"MEMQ_SEARCH_WEIGHT_BM25": "0", "MEMQ_SEARCH_WEIGHT_ENTITY": "0"},
    "hybrid": {},  # the configured weights
}
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TOP_K = 10

Results = dict[int, dict[str, float]]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


def said(turn: Mapping[str, Any]) -> str:
    """A turn's message text: what was said, and a shared photo as its caption."""
    photo = f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else ""
    return f"{turn['text']}{photo}".strip()


def sessions(turns: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The turns grouped by conversation and session, each session in its order."""
    ordered = sorted(turns, key=lambda t: (t["conv_id"], t["session_index"], t["turn_index"]))
    return [list(g) for _, g in groupby(ordered, key=lambda t: (t["conv_id"], t["session_id"]))]


def session_body(session: list[dict[str, Any]]) -> dict[str, Any]:
    """What a user posts for one session (``Client.add`` keyword arguments)."""
    first = session[0]
    return {
        "messages": [{"role": "user", "content": said(t), "name": t["speaker"]} for t in session],
        "user_id": first["conv_id"],
        "metadata": {"session": first["session_id"]},
        "infer": False,
        "timestamp": datetime.fromisoformat(first["session_datetime_iso"]).replace(tzinfo=UTC),
    }


def ingest(client: Client, turns: list[dict[str, Any]]) -> float:
    """One POST per session, all queued at once (a conversation's sessions run in order), then
    waited for; returns turns per second. Raises when a job does not succeed."""
    started = time.perf_counter()
    jobs = [client.add(**session_body(s)) for s in sessions(turns)]
    for job in jobs:
        done = client.wait_for(job, timeout_s=600)
        if done["status"] != JobStatus.SUCCEEDED:
            raise RuntimeError(f"job {done['job_id']} ended {done['status']}: {done}")
    return len(turns) / (time.perf_counter() - started)


class TurnIndex:
    """Maps a hit's memory text back to the turns that said it (in its conversation)."""

    def __init__(self, turns: Iterable[Mapping[str, Any]]) -> None:
        self.by_text: dict[tuple[str, str], set[str]] = defaultdict(set)
        for turn in turns:
            self.by_text[(turn["conv_id"], said(turn))].add(turn["dia_id"])

    def dia_ids(self, conv_id: str, hits: Iterable[str]) -> list[set[str]]:
        return [self.by_text.get((conv_id, text.strip()), set()) for text in hits]


Search = Callable[[dict[str, Any]], list[str]]
"""A question → the memory texts found, best first."""


def asked_at(turns: Iterable[Mapping[str, Any]]) -> dict[str, datetime]:
    """When each conversation's questions are asked: right after its last session (relative
    times in a question, "last month", are read against it, as its asker would mean them)."""
    latest: dict[str, datetime] = {}
    for turn in turns:
        moment = datetime.fromisoformat(turn["session_datetime_iso"]).replace(tzinfo=UTC)
        latest[turn["conv_id"]] = max(moment, latest.get(turn["conv_id"], moment))
    return latest


def api_search(client: Client, asked: Mapping[str, datetime] | None = None) -> Search:
    def search(question: dict[str, Any]) -> list[str]:
        conv = question["conv_id"]
        hits = client.search(
            question["question"],
            user_id=conv,
            top_k=TOP_K,
            reference_time=(asked or {}).get(conv),
        )
        return [h["memory"] for h in hits]

    return search


def score(found: list[set[str]], evidence: set[str]) -> dict[str, bool]:
    def within(k: int) -> set[str]:
        return set().union(*found[:k]) if found[:k] else set()

    return {
        "all@5": evidence <= within(5),
        "all@10": evidence <= within(10),
        "any@10": bool(evidence & within(10)),
        "n": True,
    }


def evaluate(
    answers: Mapping[str, list[str]], questions: list[dict[str, Any]], index: TurnIndex
) -> Results:
    """all@5, all@10, any@10 per category (and 0 = categories 1-4 together), from the texts
    found for each question (by ``qa_id``)."""
    totals: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for question in questions:
        found = index.dia_ids(question["conv_id"], answers[question["qa_id"]])
        scores = score(found, set(question["evidence"]))
        category = question["category"]
        for bucket in (category, 0) if category != 5 else (5,):
            for name, value in scores.items():
                totals[bucket][name] += float(value)
    return {
        c: {k: (v / t["n"] if k != "n" else v) for k, v in t.items()} for c, t in totals.items()
    }


def ask_all(search: Search, questions: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {q["qa_id"]: search(q) for q in questions}


def table(results: dict[str, Results]) -> str:
    header = (
        "| category | n | "
        + " | ".join(f"{m} all@5 | {m} all@10 | {m} any@10" for m in results)
        + " |"
    )
    lines = [header, "|" + "---|" * (2 + 3 * len(results))]
    first = next(iter(results.values()))
    for category in (1, 2, 3, 4, 5, 0):
        if category not in first:
            continue
        label = "overall (1-4)" if category == 0 else f"{category} {CATEGORIES[category]}"
        cells = [
            f"{results[m][category][k]:.3f}" for m in results for k in ("all@5", "all@10", "any@10")
        ]
        lines.append(f"| {label} | {int(first[category]['n'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
