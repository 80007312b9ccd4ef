"""A private Redis or Elasticsearch as a process of its own, to stop and start under a run.

The chaos benchmark needs services it may take down without touching the shared stack. The
tests have them (``tests/private_services.py``); a benchmark does not import the tests, so it
runs ``python -m tests.private_services KIND --data-dir DIR --port N`` in this checkout: the
process prints ``URL=<url>`` once the service is up (ready) and stops it on SIGTERM.
``start`` after ``stop`` runs the same command again, so the service comes back on the same
port with the same data, as after an outage.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the checkout whose helper processes (tests/) run


def free_port() -> int:
    """A port nobody listens on now, as the system hands one out."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def announced(process: subprocess.Popen[str], key: str, timeout_s: float) -> str | None:
    """The value of the ``KEY=value`` line ``process`` prints first on its standard output (how
    a helper process says it is ready), or None if it prints another line or none in time."""
    out = process.stdout
    assert out is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(out.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not lines or not lines[0].startswith(f"{key}="):
        return None
    return lines[0].strip().partition("=")[2]


def ended(process: subprocess.Popen[str], timeout_s: float) -> None:
    """SIGTERM ``process``, wait for its end, close its pipe."""
    process.terminate()
    process.wait(timeout=timeout_s)
    if process.stdout is not None:
        process.stdout.close()


class ServiceProcess:
    """``kind`` ("redis" or "elasticsearch") on ``port`` with its data in ``data_dir``, run with
    ``env``, its output appended to ``log``; ``url`` is known once it has started. ``start``
    waits up to ``ready_s``."""

    def __init__(
        self, kind: str, data_dir: Path, port: int, env: Mapping[str, str], log: Path
    ) -> None:
        self.kind, self.data_dir, self.port, self.env = kind, data_dir, port, dict(env)
        self.log = log
        self.ready_s = 300.0
        self.url = ""
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "tests.private_services", self.kind]
        command += ["--data-dir", str(self.data_dir), "--port", str(self.port)]
        # ``-m`` from the checkout's root: its ``tests`` package comes first on the path.
        with self.log.open("a") as log:
            self._process = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=log, text=True
            )
        url = announced(self._process, "URL", self.ready_s)
        if url is None:
            self.stop()
            raise RuntimeError(f"private {self.kind} did not start: see {self.log}")
        self.url = url

    def stop(self) -> None:
        """SIGTERM: the service stops as a restart would stop it (Redis writes its file)."""
        if self._process is not None:
            ended(self._process, 120)
            self._process = None
