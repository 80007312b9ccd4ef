"""``memq status``'s answer: typed, and printed with ``--json`` as the one object it was."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memq.status import Status
from pipeline.store.reads import JobSummary


def test_the_json_status_names_each_part_and_spells_dead_jobs_as_json() -> None:
    dead = JobSummary(
        job_id="j1", reason="llm unreachable", updated_at=datetime(2026, 5, 1, tzinfo=UTC)
    )
    status = Status({"memq.io": 3}, {"dead": 1}, [dead], ["io@host"], {"io@host": 61})
    assert json.loads(json.dumps(status.as_json(), default=str)) == {
        "queues": {"memq.io": 3},
        "jobs": {"dead": 1},
        "dead": [
            {"job_id": "j1", "reason": "llm unreachable", "updated_at": "2026-05-01T00:00:00Z"}
        ],
        "workers": ["io@host"],
        "uptimes": {"io@host": 61},
    }
