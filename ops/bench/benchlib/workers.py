"""memq's workers as processes of their own, a backfill through them, and what the stores hold
after."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.domain.jobs import JobStatus
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames

TOPICS = ["hiking", "jazz", "pottery", "chess", "sailing", "baking", "cycling", "gardening"]


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


def count(env: dict[str, str], prefix: str) -> tuple[int, int]:
    client = make_client(Settings().es)
    names = IndexNames(prefix)
    client.indices.refresh(index=[names.memories, names.jobs])
    memories = client.count(index=names.memories)["count"]
    jobs = client.count(index=names.jobs, query={"term": {"status": JobStatus.SUCCEEDED}})["count"]
    return int(jobs), int(memories)
