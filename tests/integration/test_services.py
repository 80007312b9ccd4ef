"""The processes of the stack: a real worker over the real Redis, the API, Flower."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pipeline.config import Settings
from tests.processes import WorkerProcess, free_port
from workers.app import HEALTH_TASK, MemqCelery, create_celery

pytestmark = pytest.mark.integration


def test_health_task_runs_in_a_real_worker_process(
    worker: WorkerProcess, celery_app: MemqCelery
) -> None:
    result = celery_app.send_task(HEALTH_TASK)
    reply = result.get(timeout=30)
    assert reply["elasticsearch"]["status"] in ("green", "yellow")
    assert result.status == "SUCCESS"
    assert "memq.health" in worker.tail(200)


def test_the_stack_worker_answers(stack_settings: Settings) -> None:
    app = create_celery(stack_settings)
    try:
        reply = app.send_task(HEALTH_TASK).get(timeout=30)
    finally:
        app.close()
    assert reply["elasticsearch"]["nodes"] == 1


def test_api_healthz(stack_settings: Settings) -> None:
    response = httpx.get(f"http://{stack_settings.api.host}:{stack_settings.api.port}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def flower_login(settings: Settings) -> tuple[str, str] | None:
    """The stack's Flower login (ops/test passes the one ops/up generated)."""
    if settings.flower.basic_auth is None:
        return None
    user, _, password = settings.flower.basic_auth.get_secret_value().split(",")[0].partition(":")
    return user, password


def test_flower_answers_and_sees_the_worker(stack_settings: Settings) -> None:
    base = f"http://{stack_settings.flower.host}:{stack_settings.flower.port}"
    auth = flower_login(stack_settings)
    assert httpx.get(f"{base}/healthcheck", auth=auth).text == "OK"
    workers = httpx.get(
        f"{base}/api/workers", params={"refresh": "true"}, auth=auth, timeout=30
    ).json()
    assert {"memq-io", "memq-cpu"} <= {name.split("@")[0] for name in workers}
    metrics = httpx.get(f"{base}/metrics", auth=auth).text
    assert "flower_events_total" in metrics or "flower_worker_online" in metrics


def test_flower_will_not_start_without_a_login(test_env: dict[str, str]) -> None:
    env = {k: v for k, v in test_env.items() if k != "MEMQ_FLOWER_BASIC_AUTH"}
    done = subprocess.run(
        [sys.executable, "-m", "memq.cli", "flower"],
        env={**env, "MEMQ_FLOWER_PORT": str(free_port())},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "MEMQ_FLOWER_BASIC_AUTH" in done.stderr


def test_ops_generates_a_private_flower_login(tmp_path: Path) -> None:
    """ops keeps a generated login in its state directory, readable by its owner only."""
    lib = Path(__file__).resolve().parents[2] / "ops" / "lib.sh"
    script = (
        f"MEMQ_OPS_STATE_DIR={tmp_path} source {lib}; unset MEMQ_FLOWER_BASIC_AUTH; flower_auth"
    )
    first = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    again = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    user, _, password = first.stdout.partition(":")
    assert user == "memq" and len(password) == 32 and first.stdout == again.stdout
    assert (tmp_path / "flower-auth").stat().st_mode & 0o777 == 0o600


def test_flower_requires_its_login(test_env: dict[str, str], tmp_path: Path) -> None:
    """MEMQ_FLOWER_BASIC_AUTH puts the dashboard and its API behind a login."""
    port = free_port()
    env = {
        **test_env,
        "MEMQ_FLOWER_PORT": str(port),
        "MEMQ_FLOWER_BASIC_AUTH": "ops:s3cret-pass-long",
    }
    log = (tmp_path / "flower.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "memq.cli", "flower"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                anonymous = httpx.get(f"{base}/api/workers", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.3)
        else:
            pytest.fail(f"flower did not start: {(tmp_path / 'flower.log').read_text()[-2000:]}")
        assert anonymous.status_code == 401
        assert (
            httpx.get(
                f"{base}/api/workers", auth=("ops", "s3cret-pass-long"), timeout=10
            ).status_code
            == 200
        )
        assert (
            httpx.get(f"{base}/api/workers", auth=("ops", "wrong"), timeout=10).status_code == 401
        )
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_memq_status_reports_queues_jobs_and_workers(
    test_env: dict[str, str], worker: WorkerProcess
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memq.cli", "status"],
        env=test_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("queues:") and test_env["MEMQ_QUEUES_IO"] in lines[0]
    assert lines[1].startswith("jobs:")
    assert lines[2].startswith("workers:") and "memqtest@" in lines[2]
    assert " up " in lines[2]  # how long each worker has run: a restart shows


def test_memq_status_json_is_one_object_for_scripts(
    test_env: dict[str, str], worker: WorkerProcess
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memq.cli", "status", "--json"],
        env=test_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert set(status) == {"queues", "jobs", "dead", "workers", "uptimes"}
    assert status["queues"][test_env["MEMQ_QUEUES_IO"]] >= 0
    assert any(name.startswith("memqtest@") for name in status["workers"])
