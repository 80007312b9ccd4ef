"""``memq backfill`` as a real subprocess, interrupted with SIGINT halfway and resumed from its
checkpoint; every conversation's memories exist exactly once. The jobs are processed by the test
session's own worker process, on its private queues and index prefix (a worker of the shared
stack may run other code than this tree's).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames
from tests.processes import WorkerProcess
from workers.intake import job_id_for

pytestmark = pytest.mark.integration

USERS, SESSIONS_PER_USER = 40, 6
REPO = Path(__file__).resolve().parents[2]


def archive(run: str) -> list[dict[str, Any]]:
    """USERS x SESSIONS_PER_USER conversations of two unique turns each, in shuffled order."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    rows = [
        {
            "id": f"s{s}",
            "user_id": f"bf-{run}-u{u}",
            "timestamp": (start + timedelta(days=s, minutes=u)).isoformat(),
            "messages": [
                {"role": "user", "content": f"{run} user {u} session {s}: I planted tomatoes"},
                {"role": "assistant", "content": f"{run} user {u} session {s}: lovely"},
            ],
            "metadata": {"batch": run},
        }
        for u in range(USERS)
        for s in range(SESSIONS_PER_USER)
    ]
    random.Random(run).shuffle(rows)
    return rows


def backfill_command(path: Path, checkpoint: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "memq.cli",
        "backfill",
        str(path),
        "--format=memq-jsonl",
        "--no-infer",
        f"--checkpoint={checkpoint}",
        "--rate=0",
        "--max-in-flight=32",
        "--timeout-s=300",
    ]


def done_keys(checkpoint: Path) -> set[str]:
    if not checkpoint.exists():
        return set()
    return set(json.loads(checkpoint.read_text())["done"])


def interrupt_when(process: subprocess.Popen[bytes], checkpoint: Path, done: int) -> None:
    deadline = time.monotonic() + 180
    while len(done_keys(checkpoint)) < done:
        assert process.poll() is None, "the backfill ended before it could be interrupted"
        assert time.monotonic() < deadline, "the backfill made no progress (workers running?)"
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)


def job_id(row: dict[str, Any]) -> str:
    request = AddRequest(
        scope=Scope(user_id=row["user_id"]), messages=[MessageIn(role="user", content="x")]
    )
    return job_id_for(request, f"backfill:memq-jsonl:{row['user_id']}/{row['id']}")


def stored_memories(es: Elasticsearch, names: IndexNames, run: str) -> list[tuple[str, str]]:
    es.indices.refresh(index=names.memories)
    response = es.search(
        index=names.memories,
        query={"prefix": {"user_id": f"bf-{run}-"}},
        size=5000,
        source=["user_id", "text"],
    )
    return [(h["_source"]["user_id"], h["_source"]["text"]) for h in response["hits"]["hits"]]


def job_records(es: Elasticsearch, names: IndexNames, ids: list[str]) -> list[JobRecord]:
    docs = es.mget(index=names.jobs, ids=ids)["docs"]
    assert all(d.get("found") for d in docs), "a conversation has no job"
    return [JobRecord.model_validate(d["_source"]) for d in docs]


def test_interrupted_backfill_resumes_without_duplicates_or_gaps(
    settings: Settings, test_env: dict[str, str], worker: WorkerProcess, tmp_path: Path
) -> None:
    env = test_env
    run = uuid.uuid4().hex[:8]
    rows = archive(run)
    path = tmp_path / "archive.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    checkpoint = tmp_path / "checkpoint.json"
    command = backfill_command(path, checkpoint)
    started = time.monotonic()

    first = subprocess.Popen(command, env=env, cwd=REPO, stderr=subprocess.PIPE)
    interrupt_when(first, checkpoint, done=len(rows) // 3)
    _, first_err = first.communicate(timeout=60)
    assert first.returncode == 130, first_err.decode()
    assert b"interrupted; run again" in first_err and b"Traceback" not in first_err
    done_first = done_keys(checkpoint)
    assert len(rows) // 3 <= len(done_first) < len(rows)

    second = subprocess.run(
        command, check=False, env=env, cwd=REPO, capture_output=True, timeout=600
    )
    elapsed_s = time.monotonic() - started
    assert second.returncode == 0, second.stderr.decode()
    summary = second.stderr.decode().strip().splitlines()[-1]
    assert f"{len(rows)} conversations" in summary and "0 failed, 0 dead" in summary
    assert done_keys(checkpoint) == {f"{r['user_id']}/{r['id']}" for r in rows}
    print(f"\nbackfill throughput: {len(rows) / elapsed_s:.1f} conversations/s ({summary})")

    es = make_client(settings.es)
    names = IndexNames(settings.es.index_prefix)
    memories = stored_memories(es, names, run)
    expected = {(r["user_id"], m["content"]) for r in rows for m in r["messages"]}
    assert max(Counter(memories).values()) == 1, "a memory was stored twice"
    assert set(memories) == expected

    records = job_records(es, names, [job_id(r) for r in rows])
    assert {r.status for r in records} == {JobStatus.SUCCEEDED}
    assert_sessions_ran_oldest_first(rows, records)


def assert_sessions_ran_oldest_first(rows: list[dict[str, Any]], records: list[JobRecord]) -> None:
    """Each user's jobs were accepted (hence run) in the order of their conversations' times."""
    by_user: dict[str, list[tuple[str, datetime]]] = {}
    for row, record in zip(rows, records, strict=True):
        by_user.setdefault(row["user_id"], []).append((row["timestamp"], record.created_at))
    for sessions in by_user.values():
        accepted = [created for _, created in sorted(sessions)]
        assert accepted == sorted(accepted)
