"""Single-conversation latency on an idle stack: submit one conversation, wait for its record
to say ``succeeded``, then the next; p50/p95 over ``--jobs`` in a row (after a few warm-up
jobs). The scripted LLM answers at once, so this is memq's own path: intake, the task hops,
Redis, Elasticsearch, the local embedder.

With ``--baseline DIR`` (a checkout of an earlier memq, e.g. a ``git worktree`` of another
commit) the same probe runs against that code too, in the same run, alternating: workers and
probe are started in DIR with DIR first on PYTHONPATH (same virtualenv, same services). The
probe submits in process (``workers.intake.submit``, what the API's POST calls) and polls the
job record every 5 ms; it does not go through HTTP, which would add the same few milliseconds
to both sides.

    .venv/bin/python ops/bench/latency_single.py [--jobs 50] [--rounds 2] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from benchlib.model import ScriptedModel
from benchlib.replies import facts_reply
from benchlib.workers import start_workers

from pipeline.config import Settings
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames, drop_indices

ROOT = Path(__file__).resolve().parents[2]

WARM_UP = 5
PROBE = """
import json, sys, time, uuid
from pipeline.config import Settings
from pipeline.domain.models import AddRequest, MessageIn, Scope
from workers.app import create_celery
from workers.intake import submit
TERMINAL = {"succeeded", "failed", "dead"}  # plain strings: the probe runs against any tree
app = create_celery(Settings())
store = app.runtime.store
count, warm = int(sys.argv[1]), int(sys.argv[2])
run = uuid.uuid4().hex[:6]
took = []
for i in range(warm + count):
    messages = [
        MessageIn(role="user", content=f"I adopted a cat called Tom{i} in Lisbon ({run})."),
        MessageIn(role="assistant", content="Lovely! How is Tom settling in?"),
        MessageIn(role="user", content=f"Great, he sleeps on my desk since day {i}."),
    ]
    request = AddRequest(scope=Scope(tenant="lat", user_id=f"{run}-u{i % 5}"), messages=messages)
    started = time.perf_counter()
    job = submit(app, request).record.job_id
    while True:
        record = store.get_job(job)
        if record is not None and record.status in TERMINAL:
            break
        time.sleep(0.005)
    if record.status != "succeeded":
        raise SystemExit(f"job {job} {record.status}: {record.reason}")
    if i >= warm:
        took.append(time.perf_counter() - started)
print(json.dumps(took))
"""


def env_for(llm: ScriptedModel, run: str, tree: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(tree),
        "MEMQ_ES_INDEX_PREFIX": f"memqbench-latency-{run}",
        "MEMQ_LLM_BASE_URL": llm.base_url,
        "MEMQ_LLM_MODEL": "scripted",
        **{
            f"MEMQ_QUEUES_{q.upper()}": f"bench-latency-{run}.{q}"
            for q in ("io", "cpu", "backfill")
        },
    }


def probe(llm: ScriptedModel, tree: Path, jobs: int, logs: Path) -> list[float]:
    run = uuid.uuid4().hex[:6]
    env = env_for(llm, run, tree)
    run_logs = logs / run  # one folder of worker logs per probe
    run_logs.mkdir()
    running = start_workers(env, run_logs, tree)
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(jobs), str(WARM_UP)],
            check=False,
            env=env,
            cwd=tree,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise SystemExit(f"latency_single: the probe in {tree} failed:\n{done.stderr[-2000:]}")
        took: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
        return took
    finally:
        for worker in running:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=60)
        settings = Settings()
        names = IndexNames(prefix=f"memqbench-latency-{run}")
        drop_indices(make_client(settings.es), names)


def summary(label: str, took: list[float]) -> dict[str, Any]:
    ordered = sorted(took)
    return {
        "code": label,
        "jobs": len(took),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=Path)
    args = parser.parse_args(argv)
    trees = [("this tree", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
    took: dict[str, list[float]] = {label: [] for label, _ in trees}
    logs = Path(f"/tmp/memq-latency-{uuid.uuid4().hex[:6]}")
    logs.mkdir()
    with ScriptedModel() as llm:
        llm.responder = facts_reply
        for round_no in range(args.rounds):
            for label, tree in trees if round_no % 2 == 0 else list(reversed(trees)):
                took[label] += probe(llm, tree, args.jobs, logs)
                print(f"round {round_no + 1}: {summary(label, took[label][-args.jobs :])}")
    for label, _ in trees:
        print(json.dumps(summary(label, took[label])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
