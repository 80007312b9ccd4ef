"""A scripted OpenAI-compatible HTTP server: the one thing the tests fake is the model.

It speaks OpenAI's wire format over real HTTP, so memq's own client code (the ``openai`` SDK,
timeouts, retries, error translation) runs for real against it.

- ``POST /v1/chat/completions``: answers the next scripted step, or ``responder(request)``
  when the script is empty (default: ``{"memory": []}``).
- ``POST /v1/embeddings``: deterministic unit vectors derived from a hash of each input text.
  They stand in for an embedding model only; similar texts do NOT get similar vectors.
- ``GET /v1/models``: one model, so health checks pass.
- A provider model (``provider=ProviderModel(...)``, or ``--latency-median-s`` and friends as a
  process) makes chat answers behave as a hosted model under load: each takes a lognormal time
  (median and p95 given), and a request beyond the concurrency limit is refused ``429`` with
  ``Retry-After``. Refused requests are counted in ``refused``, not recorded in ``requests``.
- Admin (not recorded): ``POST /_script`` ``{"chat": [step...], "embeddings": [step...],
  "default": "reply text", "refuse_json_schema": true, "provider": {"median_s": 1, "p95_s": 3,
  "limit": 16, "retry_after_s": 1, "seed": 0} or null}``, ``GET /_requests``, ``GET /_counts``
  (``{"chat": n, "embeddings": n, "refused": n}``, cheap where ``/_requests`` is not), ``POST
  /_reset``.
- ``refuse_json_schema``: act as a server without structured outputs (older vLLM, llama.cpp
  builds, some gateways): a chat request whose ``response_format`` is of type ``json_schema``
  gets a 400 naming ``response_format``; ``json_object`` and plain requests are served.
- Every chat reply reports ``usage``: prompt tokens = words in the request's messages,
  completion tokens = words in the reply (a stand-in for a tokenizer, deterministic). A
  request's ``max_tokens`` cuts the reply to that many words, with ``finish_reason`` ``length``.

A reply may name the stored memories a fact replaces by their text, as a test knows them:
``{"memory": [{"text": "Lives in Berlin", "replaces_text": ["Lives in Lisbon"]}]}`` (a string
or a list). The server turns it into ``"replaces": [<number>]``, the number under which that
memory is listed in the prompt it was sent (``N. text`` lines); a text the prompt does not list
gets no number, as a model that did not see it would give none.

A step is a reply text, ``Fail(status, message)``, ``Delay(seconds, then)``, ``Garbage()`` or
``Normal()`` (answer as if unscripted). As JSON: ``{"reply": "..."}``, ``{"fail": 500,
"message": "..."}``, ``{"delay": 3, "then": {...}}``, ``{"garbage": true}``, ``{"normal": true}``.

In-process: ``with FakeLLMServer() as server: ... server.base_url``. As a process:
``python -m tests.fakellm --port N [--replies-file F] [--responder-url URL]`` (one reply text
per line, served in order before the default; ``--responder-url``: an unscripted chat request's
JSON body is POSTed there and the answer's body is the reply text, so a program that runs the
server as a process still decides its replies); it prints ``FAKELLM_URL=<base_url>`` once it is
listening. The benchmarks (``ops/bench``) run it that way.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import random
import re
import signal
import sys
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULT_REPLY = '{"memory": []}'
MODEL_NAME = "fake-llm"
# What a server without structured outputs answers (vLLM's and llama.cpp's wording differ;
# all name the parameter).
REFUSED_JSON_SCHEMA = {
    "message": "response_format of type json_schema is not supported by this server",
    "type": "invalid_request_error",
    "param": "response_format",
    "code": None,
}


@dataclass(frozen=True)
class Fail:
    """Answer with an OpenAI-style error body and this HTTP status."""

    status: int = 500
    message: str = "scripted failure"


@dataclass(frozen=True)
class Garbage:
    """Answer 200 with a body that is not JSON."""

    body: str = "<html>definitely not json</html>"


@dataclass(frozen=True)
class Normal:
    """Answer as if the script were empty (chat: the responder; embeddings: vectors)."""


@dataclass(frozen=True)
class Delay:
    """Sleep ``seconds`` (so a client timeout fires), then answer ``then``."""

    seconds: float
    then: Step = Normal()


Step = str | Fail | Delay | Garbage | Normal

Z95 = 1.6448536269514722  # the standard normal's 95th percentile


@dataclass(frozen=True)
class ProviderModel:
    """A hosted model's behaviour under load: answer latency lognormal with this median and p95,
    at most ``limit`` requests in flight, the rest refused 429 with ``Retry-After``."""

    median_s: float = 1.0
    p95_s: float = 3.0
    limit: int = 16
    retry_after_s: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.median_s <= self.p95_s or self.limit < 1 or self.retry_after_s < 0:
            raise ValueError(f"inconsistent provider model {self}")

    @property
    def sigma(self) -> float:
        """The spread of ln(latency) that puts p95 where it was asked for."""
        return math.log(self.p95_s / self.median_s) / Z95

    @property
    def mean_s(self) -> float:
        return self.median_s * math.exp(self.sigma**2 / 2)

    @property
    def ceiling(self) -> float:
        """Answers per second at ``limit`` in flight: the most any client can get."""
        return self.limit / self.mean_s

    def latency(self, rng: random.Random) -> float:
        """One answer's latency: ln(latency) is normal with mean ln(median)."""
        return rng.lognormvariate(math.log(self.median_s), self.sigma)


Responder = Callable[[dict[str, Any]], str]


def step_from_json(data: Any) -> Step:
    """Build a step from its JSON form (see the module docstring); ValueError if unknown."""
    if isinstance(data, str):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"a step is a string or an object, not {data!r}")
    if "reply" in data:
        return str(data["reply"])
    if "fail" in data:
        return Fail(int(data["fail"]), str(data.get("message", "scripted failure")))
    if "delay" in data:
        return Delay(float(data["delay"]), step_from_json(data.get("then", {"normal": True})))
    if data.get("garbage"):
        return Garbage()
    if data.get("normal"):
        return Normal()
    raise ValueError(f"unknown step {data!r}")


def fake_embedding(text: str, dims: int) -> list[float]:
    """A unit vector of ``dims`` floats, the same for the same text in any process."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    rng = random.Random(seed)
    vector = [rng.uniform(-1.0, 1.0) for _ in range(dims)]
    norm = sum(x * x for x in vector) ** 0.5 or 1.0
    return [x / norm for x in vector]


_LISTED = re.compile(r"^(\d+)\. (.*)$", re.MULTILINE)


def listed_memories(request: dict[str, Any]) -> dict[str, int]:
    """The stored memories a chat request's system prompt lists: text -> its number."""
    listed: dict[str, int] = {}
    for message in request.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") == "system" and isinstance(content, str):
            listed |= {text.strip(): int(number) for number, text in _LISTED.findall(content)}
    return listed


def with_replaced_numbers(text: str, request: dict[str, Any]) -> str:
    """``text`` with each fact's ``replaces_text`` turned into ``replaces`` numbers (see the
    module docstring); a reply that is not such JSON is returned as it is."""
    try:
        reply = json.loads(text)
    except ValueError:
        return text
    facts = reply.get("memory") if isinstance(reply, dict) else None
    if not isinstance(facts, list) or not any(
        isinstance(f, dict) and "replaces_text" in f for f in facts
    ):
        return text
    listed = listed_memories(request)
    for fact in facts:
        if isinstance(fact, dict) and "replaces_text" in fact:
            named = fact.pop("replaces_text")
            named = [named] if isinstance(named, str) else list(named)
            fact["replaces"] = [listed[t] for t in named if t in listed]
    return json.dumps(reply)


def words(value: Any) -> int:
    """Whitespace-separated words in every string inside ``value`` (the fake's tokens)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, dict):
        return sum(words(v) for v in value.values())
    if isinstance(value, list):
        return sum(words(v) for v in value)
    return 0


def capped(text: str, max_tokens: Any) -> tuple[str, str]:
    """``text`` and ``"stop"``; or, when it has more words than ``max_tokens``, its first
    ``max_tokens`` words and ``"length"``, as a server cuts a reply at its token limit."""
    if not isinstance(max_tokens, int) or words(text) <= max_tokens:
        return text, "stop"
    return " ".join(text.split()[:max_tokens]), "length"


def chat_body(
    text: str, model: str, prompt_tokens: int = 0, finish_reason: str = "stop"
) -> dict[str, Any]:
    """An OpenAI chat.completion object whose one choice says ``text``."""
    completion_tokens = words(text)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
    }


class _State:
    """Script queues and the request log, shared by handler threads under one lock."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.chat: deque[Step] = deque()
        self.embeddings: deque[Step] = deque()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.responder: Responder = lambda _request: DEFAULT_REPLY
        self.refuse_json_schema = False
        self.provider: ProviderModel | None = None
        self.rng = random.Random(0)
        self.in_flight = 0
        self.refused = 0

    def admit(self) -> float | None:
        """Under a provider model: the latency of an admitted chat request, or None when it is
        refused (the limit is reached). Without one: 0. Call ``done`` after an admitted one."""
        with self.lock:
            if self.provider is None:
                return 0.0
            if self.in_flight >= self.provider.limit:
                self.refused += 1
                return None
            self.in_flight += 1
            return self.provider.latency(self.rng)

    def done(self) -> None:
        """An admitted request was answered (whether or not the model is still on)."""
        with self.lock:
            self.in_flight -= 1

    def next_step(self, path: str, body: dict[str, Any]) -> Step:
        """Record the request and pop the next step of its script (``Normal()`` when empty)."""
        with self.lock:
            self.requests.append((path, body))
            queue = self.chat if path.endswith("/chat/completions") else self.embeddings
            return queue.popleft() if queue else Normal()

    def record(self, path: str, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append((path, body))

    def counts(self) -> dict[str, int]:
        """Chat and embedding requests recorded so far, and chat requests refused 429."""
        with self.lock:
            paths = [path for path, _body in self.requests]
            refused = self.refused
        chat = sum(path.endswith("/chat/completions") for path in paths)
        embeddings = sum(path.endswith("/embeddings") for path in paths)
        return {"chat": chat, "embeddings": embeddings, "refused": refused}

    def reset(self) -> None:
        with self.lock:
            self.chat.clear()
            self.embeddings.clear()
            self.requests.clear()
            self.responder = lambda _request: DEFAULT_REPLY
            self.refuse_json_schema = False
            self.provider = None
            self.refused = 0


class _Handler(BaseHTTPRequestHandler):
    """One request. HTTP/1.0: one request per connection, so stop() never waits on keep-alive."""

    server: _Server
    timeout = 10  # a client that stops sending must not pin a thread forever

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is ``requests``, not stderr."""

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            models = [{"id": MODEL_NAME, "object": "model", "owned_by": "memq-tests"}]
            self._send_json(200, {"object": "list", "data": models})
        elif self.path == "/_requests":
            with self.server.state.lock:
                recorded = [{"path": p, "body": b} for p, b in self.server.state.requests]
            self._send_json(200, {"requests": recorded})
        elif self.path == "/_counts":
            self._send_json(200, self.server.state.counts())
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        body = self._read_json()
        if body is None:
            self._send_json(400, {"error": {"message": "request body is not a JSON object"}})
        elif self.path == "/v1/chat/completions" and self._refused(body):
            self.server.state.record("/refused", body)  # the script is kept for the retry
            self._send_json(400, {"error": REFUSED_JSON_SCHEMA})
        elif self.path == "/v1/chat/completions":
            self._chat(body)
        elif self.path == "/v1/embeddings":
            self._answer(self.server.state.next_step(self.path, body), body)
        elif self.path.startswith("/_"):
            self._admin(body)
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def _refused(self, body: dict[str, Any]) -> bool:
        response_format = body.get("response_format")
        return (
            self.server.state.refuse_json_schema
            and isinstance(response_format, dict)
            and response_format.get("type") == "json_schema"
        )

    def _admin(self, body: dict[str, Any]) -> None:
        try:
            self.server.admin(self.path, body)
        except (ValueError, TypeError, KeyError) as exc:
            self._send_json(400, {"error": {"message": str(exc)}})
        else:
            self._send_json(200, {"ok": True})

    def _chat(self, body: dict[str, Any]) -> None:
        """A chat completion, through the provider model when there is one."""
        state = self.server.state
        latency = state.admit()
        if latency is None:
            assert state.provider is not None
            error = {"message": "rate limit reached", "type": "requests", "code": "rate_limit"}
            headers = {"Retry-After": str(state.provider.retry_after_s)}
            self._send(429, json.dumps({"error": error}).encode(), "application/json", headers)
            return
        try:
            state.stopping.wait(latency)
            self._answer(state.next_step(self.path, body), body)
        finally:
            if latency:
                state.done()

    def _answer(self, step: Step, request: dict[str, Any]) -> None:
        while isinstance(step, Delay):
            # An event, not time.sleep: stop() wakes delayed handlers so shutdown is prompt.
            self.server.state.stopping.wait(step.seconds)
            step = step.then
        if isinstance(step, Fail):
            error = {"message": step.message, "type": "fake_error", "code": step.status}
            self._send_json(step.status, {"error": error})
        elif isinstance(step, Garbage):
            self._send(200, step.body.encode(), "text/plain")
        elif self.path.endswith("/embeddings"):
            self._send_json(200, self._embeddings(request))
        else:
            text = step if isinstance(step, str) else self.server.state.responder(request)
            text = with_replaced_numbers(text, request)
            model = str(request.get("model", MODEL_NAME))
            text, ended = capped(text, request.get("max_tokens"))
            body = chat_body(text, model, words(request.get("messages", [])), ended)
            self._send_json(200, body)

    def _embeddings(self, request: dict[str, Any]) -> dict[str, Any]:
        texts = request.get("input", [])
        texts = [texts] if isinstance(texts, str) else [str(t) for t in texts]
        dims = int(request.get("dimensions") or self.server.state.dims)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_embedding(t, dims)}
            for i, t in enumerate(texts)
        ]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return {"object": "list", "data": data, "model": request.get("model"), "usage": usage}

    def _read_json(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw)
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _send(
        self, status: int, payload: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout fired): nothing left to answer


class _Server(ThreadingHTTPServer):
    # Handler threads are joined on close, so a test ends with no thread or socket left over.
    daemon_threads = False
    block_on_close = True
    # A listen backlog for a batch's calls connecting at once: socketserver's default of 5
    # drops the rest, which connect again only after the kernel's one-second SYN retry, a
    # wait no hosted provider adds (each call here is a connection of its own, HTTP/1.0).
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], state: _State) -> None:
        super().__init__(address, _Handler)
        self.state = state

    def admin(self, path: str, body: dict[str, Any]) -> None:
        """Apply ``POST /_script`` or ``POST /_reset``; ValueError for anything else."""
        if path == "/_reset":
            self.state.reset()
            return
        if path != "/_script":
            raise ValueError(f"no admin route {path}")
        chat = [step_from_json(s) for s in body.get("chat", [])]
        embeddings = [step_from_json(s) for s in body.get("embeddings", [])]
        with self.state.lock:
            self.state.chat.extend(chat)
            self.state.embeddings.extend(embeddings)
            if "refuse_json_schema" in body:
                self.state.refuse_json_schema = bool(body["refuse_json_schema"])
            if "default" in body:
                default = str(body["default"])
                self.state.responder = lambda _request: default
            if "provider" in body:
                provider = body["provider"]
                self.state.provider = ProviderModel(**provider) if provider is not None else None
                self.state.rng = random.Random(provider["seed"] if provider else 0)


class FakeLLMServer:
    """The fake in a background thread on 127.0.0.1 (``port=0``: a free port).

    ``responder`` answers chat requests when the script is empty; tests may replace it.
    ``requests`` is a copy of every model request so far, as ``(path, json body)``.
    """

    def __init__(self, port: int = 0, dims: int = 384, host: str = "127.0.0.1") -> None:
        self._state = _State(dims)
        self._server = _Server((host, port), self._state)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def responder(self) -> Responder:
        return self._state.responder

    @responder.setter
    def responder(self, responder: Responder) -> None:
        with self._state.lock:
            self._state.responder = responder

    @property
    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def provider(self) -> ProviderModel | None:
        return self._state.provider

    @provider.setter
    def provider(self, provider: ProviderModel | None) -> None:
        """Behave as ``provider`` from now on (None: answer at once, never refuse)."""
        with self._state.lock:
            self._state.provider = provider
            self._state.rng = random.Random(provider.seed if provider else 0)

    @property
    def refused(self) -> int:
        """Chat requests refused 429 by the provider model so far."""
        with self._state.lock:
            return self._state.refused

    def chat_requests(self) -> list[dict[str, Any]]:
        """The bodies of the chat completion requests, in order."""
        return [body for path, body in self.requests if path.endswith("/chat/completions")]

    def refuse_json_schema(self, refuse: bool = True) -> None:
        """Answer ``response_format: json_schema`` requests with a 400 (see the module doc)."""
        with self._state.lock:
            self._state.refuse_json_schema = refuse

    def refused_requests(self) -> list[dict[str, Any]]:
        """The bodies of the chat requests refused for asking ``json_schema``."""
        return [body for path, body in self.requests if path == "/refused"]

    def script_chat(self, *steps: Step) -> None:
        with self._state.lock:
            self._state.chat.extend(steps)

    def script_embeddings(self, *steps: Step) -> None:
        with self._state.lock:
            self._state.embeddings.extend(steps)

    def reset(self) -> None:
        """Forget the scripts and the recorded requests; restore the default responder."""
        self._state.reset()

    def start(self) -> FakeLLMServer:
        # A short poll interval keeps stop() fast (shutdown waits for the next poll).
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake delayed handlers, join every thread and close the socket."""
        self._state.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the process entry point)."""
        try:
            self._server.serve_forever()
        finally:
            self._state.stopping.set()
            self._server.server_close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def forwarding(url: str, timeout_s: float = 60.0) -> Responder:
    """A responder that POSTs each request's JSON body to ``url`` and replies with the answer's
    body (``--responder-url``); an error there drops the request's connection unanswered."""

    def respond(request: dict[str, Any]) -> str:
        data = json.dumps(request).encode()
        headers = {"Content-Type": "application/json"}
        call = urllib.request.Request(url, data=data, headers=headers, method="POST")
        with urllib.request.urlopen(call, timeout=timeout_s) as answer:
            return str(answer.read().decode())

    return respond


def read_replies(path: Path) -> Iterable[str]:
    """The non-empty lines of ``path``, each one reply text."""
    return [line for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="memq's scripted OpenAI-compatible server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--replies-file", type=Path)
    parser.add_argument("--responder-url", help="ask this URL for unscripted chat replies")
    parser.add_argument("--refuse-json-schema", action="store_true")
    parser.add_argument("--latency-median-s", type=float, help="behave as a provider under load")
    parser.add_argument("--latency-p95-s", type=float, default=3.0)
    parser.add_argument("--concurrency-limit", type=int, default=16)
    parser.add_argument("--retry-after-s", type=int, default=1)
    args = parser.parse_args(argv)
    server = FakeLLMServer(port=args.port, dims=args.dims, host=args.host)
    server.refuse_json_schema(args.refuse_json_schema)
    if args.latency_median_s is not None:
        server.provider = ProviderModel(
            args.latency_median_s, args.latency_p95_s, args.concurrency_limit, args.retry_after_s
        )
    if args.replies_file is not None:
        server.script_chat(*read_replies(args.replies_file))
    if args.responder_url is not None:
        server.responder = forwarding(args.responder_url)
    # SIGTERM ends serve_forever through SystemExit, so the socket is closed on the way out.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(0))
    print(f"FAKELLM_URL={server.base_url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
