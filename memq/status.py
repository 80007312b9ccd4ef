"""``memq status``: queue depths, jobs by status, the dead jobs awaiting replay, live workers."""

from __future__ import annotations

import json
from typing import Any

from pipeline.config import Settings
from pipeline.domain.jobs import JobStatus
from workers.app import MemqCelery, create_celery

DEAD_SHOWN = 10


def collect(app: MemqCelery) -> dict[str, Any]:
    runtime = app.runtime
    queues = runtime.settings.queues
    depths = {q: int(runtime.redis.llen(q)) for q in (queues.io, queues.cpu, queues.backfill)}
    jobs = runtime.store.job_counts()
    dead = [
        job.model_dump(mode="json")
        for job in runtime.store.jobs_in_status(JobStatus.DEAD, DEAD_SHOWN)
    ]
    workers = sorted(name for reply in app.control.ping(timeout=1.0) or [] for name in reply)
    stats = app.control.inspect(timeout=1.0).stats() or {}
    uptimes = {name: int(stats[name].get("uptime", 0)) for name in workers if name in stats}
    return {"queues": depths, "jobs": jobs, "dead": dead, "workers": workers, "uptimes": uptimes}


def worker_line(name: str, uptimes: dict[str, int]) -> str:
    """A worker and how long it has been up (a supervisor's restart shows as a short time)."""
    if name not in uptimes:
        return name
    minutes, seconds = divmod(uptimes[name], 60)
    hours, minutes = divmod(minutes, 60)
    up = f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"
    return f"{name} up {up}"


def run_status(settings: Settings, as_json: bool = False) -> int:
    """Print the status (one JSON object with ``as_json``); exit 1 when no worker answers."""
    status = collect(create_celery(settings))
    if as_json:
        print(json.dumps(status, default=str))
        return 0 if status["workers"] else 1
    print("queues:  " + ", ".join(f"{q} {n}" for q, n in status["queues"].items()))
    print(
        "jobs:    "
        + (", ".join(f"{s} {n}" for s, n in sorted(status["jobs"].items())) or "none yet")
    )
    shown = [worker_line(name, status["uptimes"]) for name in status["workers"]]
    print(f"workers: {len(shown)} ({', '.join(shown) or 'none answering'})")
    for job in status["dead"]:
        replay = f"POST /v1/jobs/{job['job_id']}/retry"
        print(f"dead:    {job['job_id']}  {job.get('reason', '')}  (replay: {replay})")
    return 0 if status["workers"] else 1
