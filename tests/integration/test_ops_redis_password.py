"""``ops/redis start`` makes Redis require a password that it generates and keeps like the
admin key (mode 600, in the state directory), never on a command line; memq's settings put
``MEMQ_REDIS_PASSWORD`` into the Redis URL. Run on a Redis of the test's own (its own state
directory and port), which ``ops/redis stop`` stops again."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pipeline.config import RedisConfig
from tests.private_services import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ops_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    port = free_port(6450, 6470)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMQ_") or k == "MEMQ_OPS_VENV"}
    env |= {
        "MEMQ_OPS_STATE_DIR": str(tmp_path / "state"),
        "MEMQ_OPS_VENV": str(Path(sys.executable).parents[1]),  # this test run's own venv
        "MEMQ_REDIS_URL": f"redis://127.0.0.1:{port}/0",
    }
    yield env
    subprocess.run([str(ROOT / "ops" / "redis"), "stop"], env=env, check=False)


def test_redis_requires_the_password_ops_generated(ops_env: dict[str, str]) -> None:
    started = subprocess.run(
        [str(ROOT / "ops" / "redis"), "start"],
        env=ops_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    state = Path(ops_env["MEMQ_OPS_STATE_DIR"])
    secret_file = state / "redis-password"
    password = secret_file.read_text().strip()
    assert len(password) >= 32 and stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    url = ops_env["MEMQ_REDIS_URL"]
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(url).ping()
    assert redis.Redis.from_url(RedisConfig(url=url, password=password).url).ping()
    pids = subprocess.run(
        ["pgrep", "-f", "redis-server"], capture_output=True, text=True, check=False
    )
    for pid in pids.stdout.split():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert password.encode() not in cmdline  # ps shows every local user the command line
