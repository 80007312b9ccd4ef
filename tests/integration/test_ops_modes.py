"""``ops/`` keeps other local users out of its state directory: the directories it makes
(and those of older installs), and the files the services it starts write there (Redis's
append-only file, the logs, Elasticsearch's data), are their owner's only. Run on the shell
library the scripts share, in a state directory of the test's own."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_state_directory_keeps_other_users_out(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "log").mkdir(parents=True)
    old_log = state / "log" / "api.log"
    old_log.write_text("written by an older install\\n")
    old_log.chmod(0o644)
    script = f"""
        umask 022
        source {ROOT}/ops/lib.sh
        ensure_dirs
        keep_private "$MEMQ_STATE_DIR/redis"
        echo appended >"$MEMQ_STATE_DIR/redis/appendonly.aof"
        echo line >"$MEMQ_LOG_DIR/worker.log"
    """
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MEMQ_OPS_STATE_DIR": str(state)}
    subprocess.run(["bash", "-c", script], env=env, check=True)
    assert mode(state) == 0o711  # the Elasticsearch user may pass through to its own
    for directory in ("log", "run", "redis"):
        assert mode(state / directory) == 0o700, directory
    for file in ("log/api.log", "log/worker.log", "redis/appendonly.aof"):
        assert mode(state / file) == 0o600, file
