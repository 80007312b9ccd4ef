"""Chaos: conversations posted through the API while worker processes are SIGKILLed at random,
Elasticsearch is stopped for a while and Redis is restarted once; then how often the API
refused a conversation during each outage, what was lost, duplicated or stranded, how many
jobs needed a manual replay, and how long after the last fault every job was terminal.

Everything it faults is its own: a private Elasticsearch node (ops/elasticsearch on ports
9420-9429/9520-9529 with its own data), a private redis-server (6420-6429), an API (8200-8299)
and an I/O and a CPU worker, each under ops/supervise as ops/up runs them. Conversations use
infer=False (3 messages, each a memory), so no model is involved: what is measured is memq's
own handling of faults. Observing the outcome reads the jobs and memories indices directly (a
count no user needs); everything a user does (posting, replaying) goes through the API.

    .venv/bin/python ops/bench/chaos.py [--conversations 500] [--kills 50] [--window-s 300]
        [--es-outage-s 60] [--redis-outage-s 10] [--max-wait-s 1200] [--seed 1]

Smaller runs: ``--conversations 60 --kills 5 --window-s 60 --es-outage-s 10``.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from benchlib.services import ServiceProcess, free_port
from elasticsearch import Elasticsearch

from memq.client import Client, MemqAPIError
from pipeline.domain.jobs import TERMINAL_STATUSES, JobStatus

ROOT = Path(__file__).resolve().parents[2]

TERMINAL = TERMINAL_STATUSES
MESSAGES_PER_CONVERSATION = 3


@dataclass
class Tally:
    """What happened, as the run goes."""

    kills: int = 0
    refusals: list[float] = field(default_factory=list)  # when the API said come back (503/429)
    faults: list[tuple[float, str]] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fault(self, what: str) -> None:
        with self.lock:
            self.faults.append((time.monotonic(), what))
        print(f"[chaos] {time.strftime('%H:%M:%S')} {what}", flush=True)


class Stack:
    """Private Redis and Elasticsearch, an API and two supervised workers."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.prefix = f"memqchaos-{uuid.uuid4().hex[:6]}"
        # Redis with the stack's password (from this environment), Elasticsearch and memq's
        # processes without the stack's settings; its data where the node's own user reaches it.
        redis_port, es_port = free_port(), free_port()
        self.redis = ServiceProcess(
            "redis", work / "redis", redis_port, os.environ, work / "redis.log"
        )
        base = {k: v for k, v in os.environ.items() if not k.startswith("MEMQ_")}
        self.es_var = Path(tempfile.mkdtemp(prefix="memq-es-"))
        self.es = ServiceProcess("elasticsearch", self.es_var, es_port, base, work / "es.log")
        self.admin_key = secrets.token_urlsafe(32)
        self.port = free_port()
        self.env = {
            **base,
            "MEMQ_ES_INDEX_PREFIX": self.prefix,
            **{f"MEMQ_QUEUES_{q.upper()}": f"{self.prefix}.{q}" for q in ("io", "cpu", "backfill")},
            "MEMQ_API_PORT": str(self.port),
            "MEMQ_API_ADMIN_KEY": self.admin_key,
            "MEMQ_OPS_STATE_DIR": str(work / "ops"),
        }
        self.supervisors: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        self.redis.start()
        self.es.start()
        self.env |= {"MEMQ_ES_URL": self.es.url, "MEMQ_REDIS_URL": self.redis.url}
        for role in ("io", "cpu"):
            self.supervise(f"worker-{role}", ["worker", f"--role={role}"])
        self.supervise("api", ["api"])
        wait_http(f"{self.url}/healthz", 180)

    def supervise(self, name: str, args: list[str]) -> None:
        log = (self.work / f"{name}.log").open("ab")
        command = [str(ROOT / "ops/supervise"), name, sys.executable, "-m", "memq.cli", *args]
        self.supervisors[name] = subprocess.Popen(
            command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def worker_pids(self) -> list[int]:
        """Every worker process: each worker's main process and its pool children."""
        pids: list[int] = []
        for name in ("worker-io", "worker-cpu"):
            for parent in children(self.supervisors[name].pid):
                pids += [parent, *children(parent)]
        return pids

    def restarts(self) -> int:
        total = 0
        for name in ("worker-io", "worker-cpu", "api"):
            path = self.work / "ops" / "run" / f"{name}.restarts"
            fields = path.read_text().split() if path.exists() else []
            total += int(fields[0]) if fields and fields[0].isdigit() else 0
        return total

    def stop(self) -> None:
        for process in self.supervisors.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.supervisors.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.redis.stop()
        self.es.stop()
        shutil.rmtree(self.es_var, ignore_errors=True)


def children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in found.stdout.split()]


def wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")


def conversation(run: str, number: int) -> list[dict[str, str]]:
    roles = ("user", "assistant", "user")
    return [
        {"role": role, "content": f"Run {run}, conversation {number}, line {line}: note {line}."}
        for line, role in enumerate(roles)
    ]


def post(client: Client, run: str, number: int, sessions: int, tally: Tally) -> None:
    """Post one conversation as a careful user would: on 503/429 or no answer, wait and post
    it again under the same idempotency key (never a second job)."""
    while True:
        try:
            job = client.add(
                conversation(run, number),
                user_id=f"{run}-s{number % sessions}",
                infer=False,
                idempotency_key=f"{run}-{number}",
            )
        except MemqAPIError as exc:
            if exc.status not in (None, 429, 503):
                raise
            with tally.lock:
                tally.refusals.append(time.monotonic())
            time.sleep(1.0)
            continue
        with tally.lock:
            tally.jobs.append(str(job["job_id"]))
        return


def ingest(stack: Stack, key: str, args: argparse.Namespace, run: str, tally: Tally) -> None:
    """The conversations, spread evenly over the fault window by a few posting threads."""
    spacing_s = args.window_s / args.conversations
    start = time.monotonic()
    with (
        Client(stack.url, key, timeout_s=30, max_retries=0) as client,
        ThreadPoolExecutor(8) as pool,
    ):
        for number in range(args.conversations):
            time.sleep(max(0.0, start + number * spacing_s - time.monotonic()))
            pool.submit(post, client, run, number, args.sessions, tally)


def faults(stack: Stack, args: argparse.Namespace, tally: Tally) -> None:
    """SIGKILLs at random moments of the window, the Elasticsearch outage at 30% of it and the
    Redis restart at 70%."""
    rng = random.Random(args.seed)
    start = time.monotonic()
    plan = [(rng.uniform(0, args.window_s), "kill") for _ in range(args.kills)]
    plan += [(0.3 * args.window_s, "es"), (0.7 * args.window_s, "redis")]
    for at, what in sorted(plan):
        time.sleep(max(0.0, start + at - time.monotonic()))
        if what == "kill":
            kill_one(stack, rng, tally)
        elif what == "es":
            tally.fault("Elasticsearch stopped")
            stack.es.stop()
            time.sleep(args.es_outage_s)
            stack.es.start()
            tally.fault("Elasticsearch healthy again")
        else:
            tally.fault("Redis stopped")
            stack.redis.stop()
            time.sleep(args.redis_outage_s)
            stack.redis.start()
            tally.fault("Redis started again")


def kill_one(stack: Stack, rng: random.Random, tally: Tally) -> None:
    pids = stack.worker_pids()
    if not pids:  # every worker is between a kill and its restart
        return
    pid = rng.choice(pids)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    tally.kills += 1
    tally.fault(f"SIGKILL worker process {pid} (kill {tally.kills})")


def statuses(es: Elasticsearch, index: str, jobs: list[str]) -> dict[str, str]:
    es.indices.refresh(index=index)
    found: dict[str, str] = {}
    for i in range(0, len(jobs), 1000):
        hits = es.search(
            index=index,
            query={"ids": {"values": jobs[i : i + 1000]}},
            size=1000,
            source_includes=["status"],
        )["hits"]["hits"]
        found.update({h["_id"]: h["_source"]["status"] for h in hits})
    return {job: found.get(job, "missing") for job in jobs}


def wait_terminal(
    es: Elasticsearch, index: str, jobs: list[str], timeout_s: float
) -> tuple[dict[str, str], float | None]:
    """The statuses once every job is terminal (and when that was), or at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = statuses(es, index, jobs)
        if all(s in TERMINAL for s in now.values()):
            return now, time.monotonic()
        if time.monotonic() > deadline:
            return now, None
        time.sleep(2)


def memories(es: Elasticsearch, index: str, run: str) -> tuple[int, int]:
    """(memories stored, distinct texts among them) for the run."""
    es.indices.refresh(index=index)
    texts: list[str] = []
    query = {"prefix": {"user_id": f"{run}-"}}
    page = es.search(index=index, query=query, size=5000, source_includes=["text"], scroll="2m")
    while page["hits"]["hits"]:
        texts += [h["_source"]["text"] for h in page["hits"]["hits"]]
        page = es.scroll(scroll_id=page["_scroll_id"], scroll="2m")
    return len(texts), len(set(texts))


def refusals_by_fault(tally: Tally) -> dict[str, int]:
    """The refusals met while Elasticsearch was down, while Redis was, and at other times
    (each window from the stop to the start, plus 2 s for the start to be seen)."""

    def window(prefix: str) -> tuple[float, float]:
        marks = [at for at, what in tally.faults if what.startswith(prefix)]
        return (marks[0], marks[-1] + 2.0) if len(marks) == 2 else (0.0, -1.0)

    es, redis = window("Elasticsearch"), window("Redis")
    counts = {"refused_es": 0, "refused_redis": 0, "refused_other": 0}
    for at in tally.refusals:
        kind = "es" if es[0] <= at <= es[1] else "redis" if redis[0] <= at <= redis[1] else "other"
        counts[f"refused_{kind}"] += 1
    return counts


def replay(stack: Stack, key: str, jobs: list[str]) -> None:
    with Client(stack.url, key, timeout_s=30) as client:
        for job in jobs:
            client.retry(job)


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    print()
    print("| measure | value | goal |")
    print("|---|---|---|")
    rows = [
        ("conversations posted (accepted jobs)", result["jobs"], args.conversations),
        ("expected memories", result["expected"], ""),
        ("SIGKILLs of worker processes", result["kills"], f">= {args.kills}"),
        ("supervisor restarts (workers, API)", result["restarts"], ""),
        ("Elasticsearch outage (stopped to healthy), s", result["es_outage_s"], ""),
        ("Redis restarts", 1, 1),
        ("API answers 503/429 during the Elasticsearch outage", result["refused_es"], 0),
        ("API answers 503/429 during the Redis outage", result["refused_redis"], 0),
        ("API answers 503/429 at other times", result["refused_other"], 0),
        ("jobs by status when the wait ended", result["first_statuses"], ""),
        ("stranded jobs (not terminal after the wait)", result["stranded"], 0),
        ("jobs that needed a manual replay (dead/failed)", result["replays"], 0),
        ("lost memories (after replays)", result["lost"], 0),
        ("duplicated memories", result["duplicated"], 0),
        ("time from last fault to all terminal, s", result["recovery_s"], "<= 60"),
    ]
    for name, value, goal in rows:
        print(f"| {name} | {value} | {goal} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=100, help="users the conversations share")
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--window-s", type=float, default=300.0, help="posting and faults")
    parser.add_argument("--es-outage-s", type=float, default=60.0)
    parser.add_argument("--redis-outage-s", type=float, default=10.0)
    parser.add_argument("--max-wait-s", type=float, default=1200.0, help="after the last fault")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    run = f"c{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="memq-chaos-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        stack = Stack(work)
        try:
            stack.start()
            result = run_chaos(stack, args, run)
        finally:
            stack.stop()
    report(args, result)
    return 0


def run_chaos(stack: Stack, args: argparse.Namespace, run: str) -> dict[str, Any]:
    with Client(stack.url, stack.admin_key) as admin:
        key = str(admin.create_key("chaos", name="chaos")["key"])
    tally = Tally()
    fault_thread = threading.Thread(target=faults, args=(stack, args, tally))
    fault_thread.start()
    ingest(stack, key, args, run, tally)
    fault_thread.join()
    last_fault = max(at for at, _ in tally.faults)
    es = Elasticsearch(stack.es.url, request_timeout=60)
    jobs_index, memories_index = f"{stack.prefix}-jobs", f"{stack.prefix}-memories"
    first, done_at = wait_terminal(es, jobs_index, tally.jobs, args.max_wait_s)
    ended_badly = [
        job for job, status in first.items() if status in (JobStatus.DEAD, JobStatus.FAILED)
    ]
    if ended_badly:
        replay(stack, key, ended_badly)
        wait_terminal(es, jobs_index, tally.jobs, 300)
    stored, distinct = memories(es, memories_index, run)
    expected = len(tally.jobs) * MESSAGES_PER_CONVERSATION
    outage = [at for at, what in tally.faults if what.startswith("Elasticsearch")]
    refused = refusals_by_fault(tally)
    return {
        "jobs": len(tally.jobs),
        "expected": expected,
        "kills": tally.kills,
        "restarts": stack.restarts(),
        "es_outage_s": round(outage[1] - outage[0]) if len(outage) == 2 else "-",
        **refused,
        "first_statuses": dict(Counter(first.values())),
        "stranded": sum(1 for s in first.values() if s not in TERMINAL),
        "replays": len(ended_badly),
        "lost": expected - distinct,
        "duplicated": stored - distinct,
        "recovery_s": round(done_at - last_fault) if done_at else f"> {args.max_wait_s:.0f}",
    }


if __name__ == "__main__":
    sys.exit(main())
