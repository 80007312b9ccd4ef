"""``memq jobs``: the jobs an operator asks about (what failed today, and why?), newest first,
from the store the services use; every tenant's unless ``--tenant`` names one."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord, JobStatus

REASON_WIDTH = 80


def run_jobs(settings: Settings, args: argparse.Namespace) -> int:
    """One line per job (``--json``: one JSON record per line), ``--limit`` of them, or every
    match with ``--all`` (a page at a time)."""
    from pipeline.services import Services
    from pipeline.serving.job_listing import MAX_JOB_PAGE, JobFilter, list_jobs

    where = JobFilter(
        tenant=args.tenant,
        statuses=tuple(args.status or ()),
        user_id=args.user_id,
        agent_id=args.agent_id,
        run_id=args.run_id,
        batch_id=args.batch_id,
        since=args.since,
        until=args.until,
    )
    store, cursor, shown = Services(settings).store, None, 0
    while True:
        size = MAX_JOB_PAGE if args.all else min(args.limit - shown, MAX_JOB_PAGE)
        page = list_jobs(store, where, size, cursor)
        for record in page.jobs:
            print(record.model_dump_json() if args.json else job_line(record))
        shown += len(page.jobs)
        cursor = page.cursor
        if cursor is None or (not args.all and shown >= args.limit):
            break
    if not shown and not args.json:
        print("no jobs match", file=sys.stderr)
    return 0


def job_line(record: JobRecord) -> str:
    """``accepted  status  phase  tenant  scope  job id  reason`` for a person."""
    ids: list[str | None] = [record.user_id, record.agent_id, record.run_id]
    if not any(ids) and record.session_key:  # a record from before the scope had fields
        ids = [part or None for part in record.session_key.split("\x1f")[1:4]]
    named = zip(("user", "agent", "run"), ids, strict=False)
    scope = "/".join(f"{name}={value}" for name, value in named if value)
    reason = (record.reason or "").replace("\n", " ")
    if len(reason) > REASON_WIDTH:
        reason = reason[: REASON_WIDTH - 1] + "…"
    accepted = record.created_at.isoformat(timespec="seconds")
    parts = [accepted, f"{record.status:<9}", f"{record.phase or '-':<9}", record.tenant]
    return "  ".join([*parts, scope or "-", record.job_id, reason]).rstrip()


def _statuses(value: str) -> list[JobStatus]:
    try:
        return [JobStatus(word.strip()) for word in value.split(",") if word.strip()]
    except ValueError as exc:
        known = ", ".join(s.value for s in JobStatus)
        raise argparse.ArgumentTypeError(f"a status is one of {known}") from exc


def _time(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("an ISO 8601 time, e.g. 2026-12-03T09:00Z") from exc


def _limit(value: str) -> int:
    number = int(value) if value.isdigit() else 0
    if number < 1:
        raise argparse.ArgumentTypeError("a whole number of 1 or more")
    return number


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    jobs = sub.add_parser("jobs", help="list jobs by status, scope, batch and time, newest first")
    jobs.add_argument("--tenant", help="one tenant's jobs (default: every tenant's)")
    jobs.add_argument(
        "--status",
        type=_statuses,
        action="extend",
        help="queued, running, succeeded, failed, dead (comma-separated or repeated)",
    )
    for name in ("user-id", "agent-id", "run-id", "batch-id"):
        jobs.add_argument(f"--{name}")
    jobs.add_argument("--since", type=_time, help="accepted at or after (ISO 8601)")
    jobs.add_argument("--until", type=_time, help="accepted before (ISO 8601)")
    jobs.add_argument("--limit", type=_limit, default=20, help="at most this many (20)")
    jobs.add_argument("--all", action="store_true", help="every job that matches")
    jobs.add_argument("--json", action="store_true", help="one JSON record per line")
    jobs.set_defaults(handler=run_jobs)
