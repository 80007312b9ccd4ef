"""``memq status``: queue depths, jobs by status, the dead jobs awaiting replay, live workers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pipeline.config import Settings
from pipeline.domain.jobs import JobStatus
from pipeline.store.reads import JobSummary
from workers.app import MemqCelery, create_celery

DEAD_SHOWN = 10


@dataclass(frozen=True)
class Status:
    """What ``memq status`` shows: queue depths, jobs by status, the latest dead jobs, the
    workers answering a ping and how long each has been up (seconds)."""

    queues: dict[str, int]
    jobs: dict[str, int]
    dead: list[JobSummary]
    workers: list[str]
    uptimes: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        """The status as ``--json`` prints it, one object."""
        dead = [job.model_dump(mode="json") for job in self.dead]
        return {
            "queues": self.queues,
            "jobs": self.jobs,
            "dead": dead,
            "workers": self.workers,
            "uptimes": self.uptimes,
        }


def collect(app: MemqCelery) -> Status:
    runtime = app.runtime
    queues = runtime.settings.queues
    depths = {q: int(runtime.redis.llen(q)) for q in (queues.io, queues.cpu, queues.backfill)}
    jobs = runtime.store.job_counts()
    dead = runtime.store.jobs_in_status(JobStatus.DEAD, DEAD_SHOWN)
    workers = sorted(name for reply in app.control.ping(timeout=1.0) or [] for name in reply)
    stats = app.control.inspect(timeout=1.0).stats() or {}
    uptimes = {name: int(stats[name].get("uptime", 0)) for name in workers if name in stats}
    return Status(depths, jobs, dead, workers, uptimes)


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
        print(json.dumps(status.as_json(), default=str))
        return 0 if status.workers else 1
    print("queues:  " + ", ".join(f"{q} {n}" for q, n in status.queues.items()))
    print(
        "jobs:    " + (", ".join(f"{s} {n}" for s, n in sorted(status.jobs.items())) or "none yet")
    )
    shown = [worker_line(name, status.uptimes) for name in status.workers]
    print(f"workers: {len(shown)} ({', '.join(shown) or 'none answering'})")
    for job in status.dead:
        replay = f"POST /v1/jobs/{job.job_id}/retry"
        print(f"dead:    {job.job_id}  {job.reason}  (replay: {replay})")
    return 0 if status.workers else 1
