"""LoCoMo through memq's API: the turns, their sessions, ingestion, the questions' search and their
scoring."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from itertools import groupby
from pathlib import Path
from typing import Any

from memq.client import Client
from pipeline.domain.jobs import JobStatus

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
