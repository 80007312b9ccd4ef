"""Run as root, ``ops/`` starts memq's services as a dedicated system user (``memq``, or
``MEMQ_OPS_USER``), never as root: Redis on a state directory of the test's own and its own
port, and the shell library's choice for the workers, the API and Flower, which falls back to
root with a warning that says why (and what to change) when that user cannot run them."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.private_services import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="ops/ changes user only when run as root"),
]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def state() -> Iterator[Path]:
    """A state directory the service user can reach (pytest's own temporary directories sit
    under directories of mode 700, as a checkout under /root would)."""
    top = Path(tempfile.mkdtemp(prefix="memq-ops-user-"))
    top.chmod(0o711)
    yield top / "state"
    subprocess.run(["rm", "-rf", str(top)], check=False)


def ops_env(state: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMQ_")}
    return base | {"MEMQ_OPS_STATE_DIR": str(state), **extra}


def test_redis_runs_as_the_service_user_and_owns_its_files(state: Path) -> None:
    port = free_port(6471, 6490)
    env = ops_env(
        state,
        MEMQ_OPS_VENV=str(Path(sys.executable).parents[1]),  # this test run's own venv
        MEMQ_REDIS_URL=f"redis://127.0.0.1:{port}/0",
    )
    redis_ops = str(ROOT / "ops" / "redis")
    try:
        started = subprocess.run(
            [redis_ops, "start"], env=env, capture_output=True, text=True, check=False
        )
        assert started.returncode == 0, started.stdout + started.stderr
        pid = int((state / "run" / "redis.pid").read_text())
        user = pwd.getpwnam("memq")
        assert Path(f"/proc/{pid}").stat().st_uid == user.pw_uid
        assert b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes()
        for path in [state / "redis", *(state / "redis").rglob("*")]:
            assert path.stat().st_uid == user.pw_uid, path
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
        status = subprocess.run(
            [redis_ops, "status"], env=env, capture_output=True, text=True, check=True
        )
        assert f"127.0.0.1:{port} (as memq)" in status.stdout
    finally:
        subprocess.run([redis_ops, "stop"], env=env, check=False)


def test_services_fall_back_to_root_with_a_reason_when_the_user_cannot_run_memq(
    state: Path,
) -> None:
    """The choice the workers, the API and Flower are started with: as ``memq`` when it can
    run the check, as root (and a warning that says so) when it cannot."""
    hidden = Path(tempfile.mkdtemp())  # mode 700: the service user cannot look inside
    script = f"""
        source {ROOT}/ops/lib.sh
        ensure_dirs
        as_service_user_prefix
        unless_service_user_can "read the checkout" test -r {ROOT}/pyproject.toml
        echo "readable: $(service_user)"
        unless_service_user_can "run memq from {hidden}" test -r {hidden}
        echo "hidden: $(service_user)"
    """
    try:
        done = subprocess.run(
            ["bash", "-c", script], env=ops_env(state), capture_output=True, text=True, check=True
        )
    finally:
        hidden.rmdir()
    readable_as = "memq" if os.access(ROOT, os.X_OK) and _others_may_enter(ROOT) else "root"
    assert f"readable: {readable_as}" in done.stdout
    assert "hidden: root" in done.stdout
    assert f"the user memq cannot run memq from {hidden}, so this service runs as root" in (
        done.stderr
    )


def _others_may_enter(path: Path) -> bool:
    """Whether every directory down to ``path`` lets other users through."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])
