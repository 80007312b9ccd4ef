"""Real memq processes started by the tests (a worker), with their output kept for failures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

from celery import Celery


class WorkerProcess:
    """One ``memq worker`` process with the given environment; can be killed and restarted."""

    def __init__(self, env: dict[str, str], log_path: Path, concurrency: int = 2) -> None:
        self.env = env
        self.log_path = log_path
        self.concurrency = concurrency
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self._spawn(log)

    def _spawn(self, log: BinaryIO) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memq.cli",
                "worker",
                f"--concurrency={self.concurrency}",
                "--hostname=memqtest@%h",
                "--loglevel=INFO",
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, app: Celery, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"worker exited with {self.process.returncode}: {self.tail()}")
            try:
                app.send_task("memq.health").get(timeout=3)
                return
            except Exception:  # not consuming yet
                continue
        raise RuntimeError(f"worker not ready within {timeout_s}s: {self.tail()}")

    def kill(self) -> None:
        """SIGKILL the whole process group: the parent and its pool children, no warm shutdown."""
        if self.process is not None and self.process.poll() is None:
            import os

            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class ApiProcess:
    """One ``memq api`` process with the given environment, on a free port of ``ports``."""

    def __init__(self, env: dict[str, str], log_path: Path, ports: range) -> None:
        self.port = free_port(ports)
        self.env = {**env, "MEMQ_API_HOST": "127.0.0.1", "MEMQ_API_PORT": str(self.port)}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        import httpx

        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "memq.cli", "api"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"api exited with {self.process.returncode}: {self.tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError(f"api not ready within {timeout_s}s: {self.tail()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def free_port(ports: range) -> int:
    """A port of ``ports`` nothing listens on now (tests of several sessions share a range)."""
    import random
    import socket

    candidates = list(ports)
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}..{ports.stop - 1}")
