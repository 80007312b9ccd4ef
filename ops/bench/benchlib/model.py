"""The scripted model (``tests/fakellm.py``) as a process of its own, its replies decided here.

The benchmarks never import the tests: the scripted OpenAI-compatible server is started as
``python -m tests.fakellm`` in this checkout, and answers every chat request through a small
HTTP callback (``--responder-url``) served in this process by ``responder``, a plain function of
the request's JSON body that returns the reply text (``benchlib.replies``). The server does the
rest as it does for the tests: the wire format, the usage counts, the provider model (latency and
429s). Its counts are read over its admin routes (``GET /_counts``), and the provider model is
set over ``POST /_script``.

Ready means: the process printed its ``FAKELLM_URL`` and answers ``GET /v1/models``. A server
that is not ready within ``ready_s`` is stopped and ``RuntimeError`` names its output.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from benchlib.services import ROOT, announced, ended

DEFAULT_REPLY = '{"memory": []}'
Z95 = 1.6448536269514722  # the standard normal's 95th percentile

Responder = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Provider:
    """A hosted model under load, as the scripted server plays it (its ``Provider``):
    latency lognormal with this median and p95, at most ``limit`` requests in flight, the rest
    refused 429 with ``Retry-After``. The latencies are drawn here too, for the bounds a run is
    compared with."""

    median_s: float = 1.0
    p95_s: float = 3.0
    limit: int = 16
    retry_after_s: int = 1
    seed: int = 0

    @property
    def sigma(self) -> float:
        return math.log(self.p95_s / self.median_s) / Z95

    @property
    def ceiling(self) -> float:
        """Answers per second at ``limit`` in flight."""
        return self.limit / (self.median_s * math.exp(self.sigma**2 / 2))

    def latency(self, rng: random.Random) -> float:
        return rng.lognormvariate(math.log(self.median_s), self.sigma)


class _Callback(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a batch's model calls arrive at once

    def __init__(self, model: ScriptedModel) -> None:
        super().__init__(("127.0.0.1", 0), _CallbackHandler)
        self.model = model


class _CallbackHandler(BaseHTTPRequestHandler):
    server: _Callback

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = self.server.model.responder(request).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


class ScriptedModel:
    """``with ScriptedModel() as llm: ... llm.base_url``; ``llm.responder`` answers chat."""

    def __init__(self, dims: int = 384, ready_s: float = 30.0) -> None:
        self.dims = dims
        self.ready_s = ready_s
        self.responder: Responder = lambda _request: DEFAULT_REPLY
        self._provider: Provider | None = None
        self._callback = _Callback(self)
        self._process: subprocess.Popen[str] | None = None
        self._url = ""

    @property
    def base_url(self) -> str:
        return self._url

    @property
    def provider(self) -> Provider | None:
        return self._provider

    @provider.setter
    def provider(self, provider: Provider | None) -> None:
        """Behave as ``provider`` from now on (None: answer at once, never refuse)."""
        body = {"provider": asdict(provider) if provider is not None else None}
        httpx.post(f"{self._admin_url}/_script", json=body, timeout=10).raise_for_status()
        self._provider = provider

    def counts(self) -> dict[str, int]:
        """``{"chat": n, "embeddings": n, "refused": n}`` so far."""
        answer = httpx.get(f"{self._admin_url}/_counts", timeout=10)
        answer.raise_for_status()
        return {str(k): int(v) for k, v in answer.json().items()}

    def chat_count(self) -> int:
        return self.counts()["chat"]

    @property
    def refused(self) -> int:
        """Chat requests refused 429 by the provider model so far."""
        return self.counts()["refused"]

    @property
    def _admin_url(self) -> str:
        return self._url.removesuffix("/v1")

    def start(self) -> ScriptedModel:
        threading.Thread(target=self._callback.serve_forever, daemon=True).start()
        callback = f"http://127.0.0.1:{self._callback.server_port}/"
        command = [sys.executable, "-m", "tests.fakellm", "--port", "0"]
        command += ["--dims", str(self.dims), "--responder-url", callback]
        # ``-m`` from the checkout's root: its ``tests`` package comes first on the path.
        self._process = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            url = announced(self._process, "FAKELLM_URL", self.ready_s)
            if url is None:
                raise RuntimeError("the scripted model did not start")
            self._url = url
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self._url}/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the scripted model at {self._url} does not answer")

    def stop(self) -> None:
        if self._process is not None:
            ended(self._process, 30)
            self._process = None
        self._callback.shutdown()
        self._callback.server_close()

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
