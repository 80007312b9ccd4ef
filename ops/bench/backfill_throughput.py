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
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the scripted model server lives with the tests

from celery import Celery  # noqa: E402
from elasticsearch import Elasticsearch  # noqa: E402

from pipeline.config import Settings  # noqa: E402
from pipeline.jobs import JobStatus  # noqa: E402
from pipeline.store.client import make_client  # noqa: E402
from pipeline.store.indices import IndexNames, drop_indices  # noqa: E402
from tests.fakellm import FakeLLMServer  # noqa: E402

TOPICS = ["hiking", "jazz", "pottery", "chess", "sailing", "baking", "cycling", "gardening"]


def facts_reply(request: dict[str, Any]) -> str:
    """One fact per user line of the new messages, in the shape the extraction prompt asks for."""
    new = request["messages"][-1]["content"].split("New messages:", 1)[-1]
    said = re.findall(r"^user[^:]*: (.+)$", new, flags=re.MULTILINE)
    facts = [{"text": f"The user said: {line}", "attributed_to": "user"} for line in said]
    return json.dumps({"memory": facts})


def synthetic_archive(path: Path, count: int, run: str) -> None:
    with path.open("w") as out:
        for i in range(count):
            topic = TOPICS[i % len(TOPICS)]
            messages = [
                {
                    "role": "user",
                    "content": f"Yesterday I spent the afternoon on {topic} with Marta ({i}).",
                },
                {
                    "role": "assistant",
                    "content": f"That sounds fun! How long have you been into {topic}?",
                },
                {
                    "role": "user",
                    "content": f"Since {2010 + i % 12}. I practise every weekend near Lisbon.",
                },
            ]
            line = {
                "id": f"c{i}",
                "user_id": f"{run}-u{i % 20}",
                "timestamp": f"2024-01-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
                "messages": messages,
            }
            out.write(json.dumps(line) + "\n")


def start_workers(
    env: dict[str, str], logs: Path, cwd: Path | None = None
) -> list[subprocess.Popen[bytes]]:
    """An I/O and a CPU worker, as ops/ runs them (from the source tree ``cwd`` if given:
    ``-m`` puts the working directory first on sys.path), waited for on both queues."""
    workers = []
    for role in ("io", "cpu"):
        log = (logs / f"worker-{role}.log").open("wb")
        workers.append(
            subprocess.Popen(
                [sys.executable, "-m", "memq.cli", "worker", f"--role={role}"],
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    for queue in ("io", "cpu"):
        subprocess.run(
            [sys.executable, "-m", "memq.cli", "health", f"--queue={queue}", "--timeout-s=120"],
            env=env,
            cwd=cwd,
            check=True,
            capture_output=True,
        )
    return workers


def backfill(
    env: dict[str, str], archive: Path, fmt: str, infer: bool, checkpoint: Path, *, cwd: Path
) -> float:
    command = [
        sys.executable,
        "-m",
        "memq.cli",
        "backfill",
        str(archive),
        f"--format={fmt}",
        "--infer" if infer else "--no-infer",
        f"--checkpoint={checkpoint}",
        "--rate=0",
        "--max-in-flight=64",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"backfill failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def where_time_went(es: Elasticsearch, names: IndexNames, tenant: str) -> str:
    """From the job records (direct client, not counted): the mean time from acceptance to
    the end, how much of it the phases worked (each phase's time over its batch, from
    ``timings_ms``), the rest (task hops, queues, waiting for the session's turn), and the
    mean batch size."""
    es.indices.refresh(index=names.jobs)
    hits = es.search(
        index=names.jobs,
        query={"term": {"tenant": tenant}},
        size=10_000,
        source_includes=["created_at", "finished_at", "timings_ms", "counts"],
    )["hits"]["hits"]
    records = [hit["_source"] for hit in hits if hit["_source"].get("finished_at")]
    if not records:
        return "no finished job records"
    phases: Counter[str] = Counter()
    total_s = 0.0
    for record in records:
        phases.update({k: float(v) for k, v in (record.get("timings_ms") or {}).items()})
        ended = datetime.fromisoformat(record["finished_at"])
        total_s += (ended - datetime.fromisoformat(record["created_at"])).total_seconds()
    n = len(records)
    worked = phases.total() / n / 1000
    sizes = [int((record.get("counts") or {}).get("batch_size", 1)) for record in records]
    each = ", ".join(f"{k} {v / n:.0f}" for k, v in phases.most_common())
    return (
        f"{n} jobs; mean {total_s / n:.2f} s from acceptance to the end, of which the phases "
        f"worked {worked:.2f} s and {total_s / n - worked:.2f} s went to hops, queues and "
        f"turns; mean batch {statistics.fmean(sizes):.1f}; phase ms per job: {each}"
    )


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


def count(env: dict[str, str], prefix: str) -> tuple[int, int]:
    client = make_client(Settings().es)
    names = IndexNames(prefix)
    client.indices.refresh(index=[names.memories, names.jobs])
    memories = client.count(index=names.memories)["count"]
    jobs = client.count(index=names.jobs, query={"term": {"status": JobStatus.SUCCEEDED}})["count"]
    return int(jobs), int(memories)


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
    with FakeLLMServer() as llm:
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
    llm: FakeLLMServer, tree: Path, args: argparse.Namespace, events: TaskEvents
) -> list[list[Any]]:
    """Both runs with the code in ``tree``, on queues and indices of their own."""
    run = uuid.uuid4().hex[:6]
    prefix = f"memqbench-backfill-{run}"
    calls_before = len(llm.chat_requests())
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
    llm: FakeLLMServer,
    tree: Path,
    calls_before: int,
) -> list[list[Any]]:
    archive = tmp / "synthetic.jsonl"
    synthetic_archive(archive, args.conversations, prefix)
    elapsed = backfill(env, archive, "memq-jsonl", True, tmp / "a.checkpoint", cwd=tree)
    jobs, memories = count(env, prefix)
    went = where_time_went(make_client(Settings().es), IndexNames(prefix), "default")
    print(f"{tree}, synthetic: {went}", flush=True)
    calls = len(llm.chat_requests()) - calls_before
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
            len(llm.chat_requests()) - calls_before - calls,
        ]
    )
    return rows


if __name__ == "__main__":
    sys.exit(main())
