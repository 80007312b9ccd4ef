"""A private memq stack for benchmarks that go through the public API: one worker and one API
process on the running Elasticsearch and Redis, under their own index prefix and queues, so a
benchmark never touches anyone else's data or jobs.

The API can be restarted with other settings (search weights, say) while the worker and the
stored memories stay: search settings live in the API process.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from memq.client import Client
from pipeline.config import Settings
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames, drop_indices

READY_TIMEOUT_S = 120.0


class Stack:
    """Worker + API under ``prefix`` with API port ``port``. ``tenant`` gets its own key."""

    def __init__(
        self,
        prefix: str,
        port: int,
        log_dir: Path,
        tenant: str = "locomo",
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.prefix = prefix
        self.settings = dict(settings or {})  # for both processes (the LLM's URL, say)
        self.port = port
        self.tenant = tenant
        self.log_dir = log_dir
        self.admin_key = secrets.token_urlsafe(32)
        self.worker: subprocess.Popen[bytes] | None = None
        self.api: subprocess.Popen[bytes] | None = None
        self.key = ""

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The processes' environment: the stack's stores (Redis's URL with its password, as
        this process's settings read it), private prefix and queues, the local MiniLM
        (benchmarks compare like with like), and ``extra`` (``MEMQ_SEARCH_*`` for the API,
        say)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMQ_")}
        stores = Settings()
        env.update(
            {
                "MEMQ_REDIS_URL": stores.redis.url,
                "MEMQ_ES_URL": ",".join(stores.es.urls),
                "MEMQ_ES_INDEX_PREFIX": self.prefix,
                "MEMQ_QUEUES_IO": f"{self.prefix}.io",
                "MEMQ_QUEUES_CPU": f"{self.prefix}.cpu",
                "MEMQ_QUEUES_BACKFILL": f"{self.prefix}.backfill",
                "MEMQ_EMBEDDER_KIND": "local",
                "MEMQ_API_PORT": str(self.port),
                "MEMQ_API_ADMIN_KEY": self.admin_key,
                **self.settings,
                **(extra or {}),
            }
        )
        return env

    def drop(self) -> None:
        settings = Settings()
        drop_indices(make_client(settings.es), IndexNames(self.prefix))

    def _spawn(self, args: list[str], log: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (self.log_dir / log).open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "memq.cli", *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_worker(self) -> None:
        self.worker = self._spawn(
            ["worker", "--role", "all", "--concurrency", "2", "--hostname", f"{self.prefix}@%h"],
            "worker.log",
            self.env(),
        )

    def start_api(self, extra: Mapping[str, str] | None = None) -> None:
        self.api = self._spawn(["api"], "api.log", self.env(extra))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.api.poll() is not None:
                raise RuntimeError(f"the API exited; see {self.log_dir / 'api.log'}")
            try:
                httpx.get(f"{self.url}/healthz", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            raise RuntimeError(f"the API was not ready in time; see {self.log_dir / 'api.log'}")
        if not self.key:
            with Client(self.url, self.admin_key) as admin:
                self.key = admin.create_key(self.tenant, name="benchmark")["key"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, timeout_s: float = 120.0) -> Client:
        return Client(self.url, self.key, timeout_s=timeout_s)

    @staticmethod
    def _stop(process: subprocess.Popen[bytes] | None) -> None:
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def stop_api(self) -> None:
        self._stop(self.api)
        self.api = None

    def stop(self) -> None:
        self.stop_api()
        self._stop(self.worker)
        self.worker = None

    @contextmanager
    def api_with(self, extra: Mapping[str, str] | None = None) -> Iterator[Client]:
        """The API restarted with ``extra`` settings; a client of the benchmark's tenant."""
        self.stop_api()
        self.start_api(extra)
        with self.client() as client:
            yield client


@contextmanager
def running_stack(
    prefix: str,
    port: int,
    log_dir: Path,
    keep: bool = False,
    reuse: bool = False,
    *,
    env: Mapping[str, str] | None = None,
) -> Iterator[Stack]:
    """A fresh stack (its indices dropped first unless ``reuse``, and afterwards unless
    ``keep``). ``reuse`` serves the indices a ``keep`` run left, as they are; ``env`` are
    settings of both its processes."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(prefix, port, log_dir, settings=env)
    if not reuse:
        stack.drop()
    try:
        stack.start_worker()
        stack.start_api()
        yield stack
    finally:
        stack.stop()
        if not keep:
            stack.drop()
