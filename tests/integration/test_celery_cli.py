"""Celery's own command line finds memq's app: ``celery -A workers.app ...`` reaches the test
worker over the real Redis (the app is built from the environment on first access)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import WorkerProcess

pytestmark = pytest.mark.integration

CELERY = Path(sys.executable).with_name("celery")


def celery(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(CELERY), "-A", "workers.app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_inspect_ping_answers(worker: WorkerProcess, test_env: dict[str, str]) -> None:
    out = celery(test_env, "inspect", "ping", "--timeout", "5")
    assert "pong" in out
    assert "OK" in out


def test_inspect_reaches_the_worker_of_these_queues(
    worker: WorkerProcess, test_env: dict[str, str]
) -> None:
    """The test worker (and no other) consumes the test queues: their names in the answer
    show the command reached it through the app built from this environment."""
    out = celery(test_env, "inspect", "active_queues", "--timeout", "5")
    assert test_env["MEMQ_QUEUES_IO"] in out
    assert test_env["MEMQ_QUEUES_CPU"] in out


def test_importing_the_module_builds_no_app() -> None:
    code = "import workers.app as m; print(m._cli_app is None)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "True"
