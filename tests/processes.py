"""Real memq processes started by the tests (a worker, the API), with their output kept for
failures. They run the code of this checkout, never whatever the stack happens to be running."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import BinaryIO

import httpx
from celery import Celery


class MemqProcess(ABC):
    """One ``memq <command>`` process with the given environment; can be killed and restarted."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @abstractmethod
    def argv(self) -> list[str]:
        """The ``memq`` subcommand and its options."""

    def command(self) -> list[str]:
        """The whole command line: this checkout's ``memq`` CLI with ``argv()``."""
        return [sys.executable, "-m", "memq.cli", *self.argv()]

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self._spawn(log)

    def _spawn(self, log: BinaryIO) -> None:
        self.process = subprocess.Popen(
            self.command(),
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"process exited with {self.process.returncode}: {self.tail()}")

    def wait_answering(self, url: str, what: str, timeout_s: float) -> None:
        """Returns once ``url`` answers 200; ``RuntimeError`` naming ``what``, with the log's
        tail, when the process exits or ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:  # not listening yet
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{what} not ready within {timeout_s}s: {self.tail()}")

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


class WorkerProcess(MemqProcess):
    """``memq worker`` consuming every queue of its environment."""

    def __init__(self, env: dict[str, str], log_path: Path, concurrency: int = 2) -> None:
        super().__init__(env, log_path)
        self.concurrency = concurrency

    def argv(self) -> list[str]:
        return [
            "worker",
            f"--concurrency={self.concurrency}",
            "--hostname=memqtest@%h",
            "--loglevel=INFO",
        ]

    def wait_ready(self, app: Celery, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                app.send_task("memq.health").get(timeout=3)
                return
            except Exception:  # not consuming yet
                continue
        raise RuntimeError(f"worker not ready within {timeout_s}s: {self.tail()}")


class ApiProcess(MemqProcess):
    """``memq api`` on the port of its environment (``MEMQ_API_PORT``)."""

    def argv(self) -> list[str]:
        return ["api"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.env['MEMQ_API_PORT']}"

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        self.wait_answering(f"{self.url}/healthz", "API", timeout_s)


def free_port() -> int:
    """A TCP port nobody listens on now (the OS's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
