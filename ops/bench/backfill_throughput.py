"""Backfill throughput, two runs side by side: synthetic conversations with LLM extraction (the
scripted OpenAI-compatible server answers instantly, so the figure is memq's own overhead), and
the LoCoMo dev turns with infer=False. Needs Elasticsearch and Redis (ops/up); starts its own
workers (one I/O, one CPU, as ops/ does) on private queues and a private index prefix. After the
synthetic run it prints where a job's time went, from the job records: the phases' time per
batch, and the rest (task hops, queues, waiting for the session's turn); and, from the task
events the workers send (what Flower shows), how long each phase task ran and how long its hop
from the task before it took.

With ``--baseline DIR`` (a checkout of an earlier memq, e.g. a ``git worktree`` of another
commit) the same runs are made with that code too, in the same invocation: its workers and its
``memq backfill`` run in DIR with DIR first on PYTHONPATH (same virtualenv, same services).

    .venv/bin/python ops/bench/backfill_throughput.py [--conversations 300] [--baseline DIR]
        [--synthetic-only]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from benchlib.model import ScriptedModel
from benchlib.replies import facts_reply
from benchlib.workers import backfill, count, start_workers, synthetic_archive, where_time_went
from celery import Celery

from pipeline.config import Settings
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames, drop_indices

ROOT = Path(__file__).resolve().parents[2]


class TaskEvents:
    """The task events the workers send (what Flower shows), received in this process: for
    each phase task of a run, how long it ran and how long its message took to start after the
    task before it in the chain had ended (the hop)."""

    def __init__(self, broker_url: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.app = Celery(broker=broker_url)
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        with self.app.connection() as connection:
            receiver = self.app.events.Receiver(connection, handlers={"*": self.events.append})
            receiver.capture(limit=None, timeout=None, wakeup=False)

    def summary(self, queues: str) -> str:
        """Per task name, for the tasks sent to queues named ``queues…``: how many, and the
        median time run and hop, in ms."""
        seen: dict[str, dict[str, dict[str, Any]]] = {}
        for event in list(self.events):
            if "uuid" in event:
                seen.setdefault(event["uuid"], {})[event["type"]] = event
        tasks: dict[str, dict[str, Any]] = {}
        for task_id, kinds in seen.items():
            sent, started, ended = (
                kinds.get(k) for k in ("task-sent", "task-started", "task-succeeded")
            )
            if sent and started and ended and str(sent.get("queue", "")).startswith(queues):
                tasks[task_id] = {
                    "name": sent["name"],
                    "parent": sent.get("parent_id"),
                    "started": started["timestamp"],
                    "ended": ended["timestamp"],
                    "runtime": ended.get("runtime", 0.0),
                }
        ran: dict[str, list[float]] = {}
        hops: dict[str, list[float]] = {}
        for task in tasks.values():
            ran.setdefault(task["name"], []).append(task["runtime"] * 1000)
            parent = tasks.get(task["parent"] or "")
            if parent is not None:
                hops.setdefault(task["name"], []).append((task["started"] - parent["ended"]) * 1000)
        return "; ".join(
            f"{name.rpartition('.')[2]} {len(times)} ran {statistics.median(times):.0f}"
            + (f", hop {statistics.median(hops[name]):.0f}" if name in hops else "")
            for name, times in sorted(ran.items())
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/locomo-dev")
    parser.add_argument("--baseline", type=Path, help="source tree of an earlier memq")
    parser.add_argument("--synthetic-only", action="store_true", help="skip the LoCoMo run")
    args = parser.parse_args(argv)
    trees = [("this tree", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
    rows: list[list[Any]] = []
    events = TaskEvents(Settings().redis.url)
    with ScriptedModel() as llm:
        llm.responder = facts_reply
        for label, tree in trees:
            rows += [[label, *row] for row in run_tree(llm, tree, args, events)]
    columns = ["code", "run", "conversations", "memories", "seconds", "conversations/s"]
    print("| " + " | ".join([*columns, "memories/s", "LLM calls"]) + " |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    return 0


def run_tree(
    llm: ScriptedModel, tree: Path, args: argparse.Namespace, events: TaskEvents
) -> list[list[Any]]:
    """Both runs with the code in ``tree``, on queues and indices of their own."""
    run = uuid.uuid4().hex[:6]
    prefix = f"memqbench-backfill-{run}"
    calls_before = llm.chat_count()
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "MEMQ_ES_INDEX_PREFIX": prefix,
            "MEMQ_LLM_BASE_URL": llm.base_url,
            "MEMQ_LLM_MODEL": "scripted",
            **{f"MEMQ_QUEUES_{q.upper()}": f"bench-{run}.{q}" for q in ("io", "cpu", "backfill")},
        }
        workers = start_workers(env, Path(tmp), tree)
        try:
            rows = run_both(
                env, Path(tmp), args, prefix=prefix, llm=llm, tree=tree, calls_before=calls_before
            )
            print(f"{tree}, per phase task (ms, medians): {events.summary(f'bench-{run}.')}")
            return rows
        finally:
            for worker in workers:
                os.killpg(worker.pid, signal.SIGTERM)
                worker.wait(timeout=60)
            drop_indices(make_client(Settings().es), IndexNames(prefix))


def run_both(
    env: dict[str, str],
    tmp: Path,
    args: argparse.Namespace,
    *,
    prefix: str,
    llm: ScriptedModel,
    tree: Path,
    calls_before: int,
) -> list[list[Any]]:
    archive = tmp / "synthetic.jsonl"
    synthetic_archive(archive, args.conversations, prefix)
    elapsed = backfill(env, archive, "memq-jsonl", True, tmp / "a.checkpoint", cwd=tree)
    jobs, memories = count(env, prefix)
    went = where_time_went(make_client(Settings().es), IndexNames(prefix), "default")
    print(f"{tree}, synthetic: {went}", flush=True)
    calls = llm.chat_count() - calls_before
    rows = [
        [
            "synthetic, infer (scripted LLM)",
            jobs,
            memories,
            f"{elapsed:.1f}",
            f"{jobs / elapsed:.1f}",
            f"{memories / elapsed:.1f}",
            calls,
        ]
    ]
    if args.synthetic_only:
        return rows
    locomo = args.data / "turns.jsonl"
    elapsed = backfill(env, locomo, "locomo", False, tmp / "b.checkpoint", cwd=tree)
    all_jobs, all_memories = count(env, prefix)
    rows.append(
        [
            "LoCoMo dev turns, infer=False",
            all_jobs - jobs,
            all_memories - memories,
            f"{elapsed:.1f}",
            f"{(all_jobs - jobs) / elapsed:.1f}",
            f"{(all_memories - memories) / elapsed:.1f}",
            llm.chat_count() - calls_before - calls,
        ]
    )
    return rows


if __name__ == "__main__":
    sys.exit(main())
