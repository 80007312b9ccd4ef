"""How fast the explorer's pages answer with 100k memories in one tenant (goal: p95 under
300 ms), measured through HTTP as a browser asks for them, signed in with a session cookie.

Seeding does not go through the workers (that would take hours of model calls): the memories,
one ADD history row each, and a few hundred job records are written straight through the
store's own bulk writes (``ElasticStore.create_memories_with_history``, ``save_jobs``) under a
private index prefix. The memories are synthetic sentences with random unit vectors, spread
over ``--users`` users (Zipf-like: the first users have most of them) and a few agents.

Then one API process serves that prefix (``api_stack.Stack``), a tenant key signs in at
``/ui/login``, and each page is asked ``--rounds`` times after a warm-up, the pages
interleaved; the table gives p50, p95 and the worst time per page.

    .venv/bin/python ops/bench/explorer_latency.py [--memories 100000] [--users 200]
        [--rounds 50] [--keep] [--reuse]
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
from benchlib.stack import Stack
from benchlib.words import WORDS, sentence

from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import Scope, history_id, md5_hex, memory_id
from pipeline.store.client import make_client
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import ensure_indices
from pipeline.store.protocol import HistoryDoc, MemoryDoc

PREFIX = "memqbench-explorer"
TENANT = "explorer-bench"
GOAL_MS = 300.0
CHUNK = 2000


def owner(rng: random.Random, users: int) -> Scope:
    """A user, Zipf-like (user 0 holds the most memories), or now and then an agent."""
    if rng.random() < 0.05:
        return Scope(tenant=TENANT, agent_id=f"agent-{rng.randrange(5)}")
    index = min(int(rng.paretovariate(1.2)) - 1, users - 1)
    return Scope(tenant=TENANT, user_id=f"user-{index:04d}")


def unit_vector(rng: np.random.Generator, dims: int) -> list[float]:
    vector = rng.standard_normal(dims)
    return [float(x) for x in vector / np.linalg.norm(vector)]


def memories(count: int, users: int, dims: int) -> Iterator[tuple[MemoryDoc, HistoryDoc]]:
    rng, vectors = random.Random(11), np.random.default_rng(11)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    for n in range(count):
        scope, text = owner(rng, users), f"{sentence(rng)} (note {n})"
        at = start + timedelta(seconds=n * 30)
        text_hash, job = md5_hex(text.lower()), f"bench-job-{n // 3}"
        doc = MemoryDoc(
            id=memory_id(scope, text_hash),
            scope=scope,
            text=text,
            text_lemmatized=text.lower(),
            embedding=unit_vector(vectors, dims),
            hash=text_hash,
            job_id=job,
            created_at=at,
            observed_at=at,
            metadata={"topic": rng.choice(WORDS)},
        )
        row = HistoryDoc(history_id(doc.id, "ADD", job), doc.id, scope, "ADD", job, at, new=text)
        yield doc, row


def jobs(count: int, users: int) -> list[JobRecord]:
    start = datetime(2025, 1, 1, tzinfo=UTC)
    statuses = [JobStatus.SUCCEEDED] * 8 + [JobStatus.FAILED, JobStatus.DEAD]
    return [
        JobRecord(
            job_id=f"bench-job-{n}",
            tenant=TENANT,
            status=statuses[n % len(statuses)],
            user_id=f"user-{n % users:04d}",
            reason=None if n % 10 < 8 else "the model refused this conversation",
            timings_ms={"extract": 420.0, "embed": 35.0, "persist": 12.0},
            counts={"facts": 3, "stored": 3, "prompt_tokens": 900, "completion_tokens": 80},
            created_at=start + timedelta(minutes=n),
            updated_at=start + timedelta(minutes=n, seconds=2),
            finished_at=start + timedelta(minutes=n, seconds=2),
        )
        for n in range(count)
    ]


def seed(count: int, users: int) -> None:
    """The memories, their history rows and job records, through the store's bulk writes."""
    settings = Settings()
    settings = settings.model_copy(
        update={"es": settings.es.model_copy(update={"index_prefix": PREFIX})}
    )
    client = make_client(settings.es)
    store = ElasticStore(client, ensure_indices(client, settings.es, settings.embedder.dims))
    batch: list[tuple[MemoryDoc, HistoryDoc]] = []
    started = time.perf_counter()
    for n, pair in enumerate(memories(count, users, settings.embedder.dims), start=1):
        batch.append(pair)
        if len(batch) == CHUNK:
            store.create_memories_with_history([d for d, _ in batch], [r for _, r in batch])
            batch = []
            print(f"\r  seeded {n}…", end="", file=sys.stderr)
    if batch:
        store.create_memories_with_history([d for d, _ in batch], [r for _, r in batch])
    store.save_jobs(jobs(500, users))
    store.make_visible()
    store.refresh_jobs()
    print(f"\nseeded {count} memories in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def sign_in(url: str, key: str) -> httpx.Client:
    """A browser-like client holding the explorer's session cookie."""
    browser = httpx.Client(base_url=url, timeout=60)
    form = browser.get("/ui/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None, "no CSRF token on the sign-in page"
    answer = browser.post("/ui/login", data={"key": key, "csrf": csrf.group(1)})
    assert answer.status_code in (200, 303) and "memq_ui" in browser.cookies, answer.text
    return browser


def pages(browser: httpx.Client) -> dict[str, str]:
    """The pages measured: each read once to find its links (a memory, a next page, a job)."""
    first = browser.get("/ui/memories", params={"user_id": "user-0000"}).text
    memory = re.search(r'href="[^"]*/ui/memories/([0-9a-f-]{36})"', first)
    next_page = re.search(r'href="([^"]*cursor=[^"]+)"', first)
    assert memory is not None and next_page is not None, "the biggest user has no pages"
    return {
        "scopes (users)": "/ui/scopes",
        "scopes (agents)": "/ui/scopes?kind=agent_id",
        "memories, newest": "/ui/memories?user_id=user-0000",
        "memories, page 2": next_page.group(1).replace("&amp;", "&"),
        "memories, contains": "/ui/memories?user_id=user-0000&contains=honey",
        "memories, filter": '/ui/memories?user_id=user-0000&filters={"topic":"tea"}&sort=oldest',
        "memory detail": f"/ui/memories/{memory.group(1)}",
        "search + explain": "/ui/search?query=where+does+she+go+hiking&user_id=user-0000",
        "jobs": "/ui/jobs",
        "jobs, failed": "/ui/jobs?status=failed",
        "job detail": "/ui/jobs/bench-job-9",
        "erase confirmation": "/ui/users/user-0001/erase",
    }


def measure(browser: httpx.Client, asked: dict[str, str], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in asked}
    for round_ in range(rounds + 3):  # 3 warm-up rounds
        for name, path in asked.items():
            started = time.perf_counter()
            answer = browser.get(path)
            elapsed = (time.perf_counter() - started) * 1000
            assert answer.status_code == 200, f"{name}: {answer.status_code} {answer.text[:200]}"
            if round_ >= 3:
                times[name].append(elapsed)
    return times


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def table(times: dict[str, list[float]]) -> str:
    lines = [f"{'page':<22} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  goal p95 < {GOAL_MS:.0f}"]
    for name, values in times.items():
        p95 = percentile(values, 95)
        verdict = "ok" if p95 < GOAL_MS else "SLOW"
        lines.append(
            f"{name:<22} {percentile(values, 50):>8.1f} {p95:>8.1f} {max(values):>8.1f}  {verdict}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--keep", action="store_true", help="keep the indices afterwards")
    parser.add_argument("--reuse", action="store_true", help="serve a kept run's indices")
    args = parser.parse_args()
    stack = Stack(PREFIX, args.port, Path(tempfile.mkdtemp(prefix="explorer-bench-")))
    stack.tenant = TENANT
    if not args.reuse:
        stack.drop()
        seed(args.memories, args.users)
    try:
        stack.start_api()
        browser, admin = sign_in(stack.url, stack.key), sign_in(stack.url, stack.admin_key)
        try:
            times = measure(browser, pages(browser), args.rounds)
            times |= measure(admin, {"admin": "/ui/admin"}, args.rounds)
        finally:
            browser.close()
            admin.close()
    finally:
        stack.stop()
        if not args.keep:
            stack.drop()
    print(f"explorer pages, {args.memories} memories in one tenant, {args.rounds} rounds")
    print(table(times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
