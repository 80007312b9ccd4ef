"""PRIVATE Elasticsearch and Redis for fault tests and the chaos benchmark: the stack's own
Elasticsearch distribution started by ``ops/elasticsearch`` on other ports with its own data
directory, and a ``redis-server`` of its own, so a test may stop them without touching the
shared services others use.

They stay with the tests, whose fixtures they are. The chaos benchmark (``ops/bench/chaos.py``)
does not import them: it runs one as a process of its own, ``python -m tests.private_services
redis|elasticsearch --data-dir DIR [--port N]``, which prints ``URL=<url>`` once the service
is up and stops it on SIGTERM (Elasticsearch keeps its data in ``DIR``, so the same command
brings it back, as a restart after an outage would)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

import httpx
import redis

OPS = Path(__file__).resolve().parents[1] / "ops"


def private_memq_env(base: Mapping[str, str], tag: str, model_url: str) -> dict[str, str]:
    """``base`` for memq processes of a test of their own: indices and queues named
    ``clusterops-<tag>``, the scripted model at ``model_url`` as LLM and embedder, and no node
    list (the test names its Elasticsearch)."""
    env = {k: v for k, v in base.items() if k != "MEMQ_ES_URLS"}
    return env | {
        "MEMQ_ES_INDEX_PREFIX": f"clusterops-{tag}",
        "MEMQ_QUEUES_IO": f"clusterops-{tag}.io",
        "MEMQ_QUEUES_CPU": f"clusterops-{tag}.cpu",
        "MEMQ_QUEUES_BACKFILL": f"clusterops-{tag}.backfill",
        "MEMQ_LLM_BASE_URL": model_url,
        "MEMQ_EMBEDDER_KIND": "openai",
        "MEMQ_EMBEDDER_BASE_URL": model_url,
        "MEMQ_EMBEDDER_MODEL": "fake-embedder",
    }


def free_port(low: int, high: int) -> int:
    """The first port in [low, high) nobody listens on."""
    for port in range(low, high):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}..{high - 1}")


class PrivateElasticsearch:
    """``ops/elasticsearch start|stop`` for a node of its own (HTTP port in ``http_ports``,
    transport port in ``transport_ports``, a small heap, data in a fresh directory that the
    node's own user can reach). ``stop`` is a real shutdown; ``start`` brings the same data
    back, as a restart after an outage would."""

    def __init__(
        self,
        env: dict[str, str],
        http_ports: tuple[int, int] = (9420, 9430),
        transport_ports: tuple[int, int] = (9520, 9530),
        heap: str = "512m",
        var: Path | None = None,
        port: int | None = None,
    ) -> None:
        self.port = port if port is not None else free_port(*http_ports)
        self.var = var if var is not None else Path(tempfile.mkdtemp(prefix="memq-es-"))
        self.var.chmod(0o755)  # the node runs as its own user, which must reach its data
        self.env = {
            **env,
            "MEMQ_ES_URL": self.url,
            "MEMQ_OPS_ES_VAR": str(self.var),
            "MEMQ_OPS_ES_TRANSPORT_PORT": str(free_port(*transport_ports)),
            "MEMQ_OPS_ES_HEAP": heap,
            # ops reads memq's settings with the venv running these tests (a worktree of the
            # checkout has none of its own)
            "MEMQ_OPS_VENV": env.get("MEMQ_OPS_VENV", str(Path(sys.executable).parents[1])),
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _ops(self, command: str) -> None:
        done = subprocess.run(
            [str(OPS / "elasticsearch"), command],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"ops/elasticsearch {command}: {done.stdout}{done.stderr}")

    def start(self) -> float:
        """Start the node and wait until it is healthy; returns the seconds that took."""
        began = time.monotonic()
        self._ops("start")
        return time.monotonic() - began

    def stop(self) -> None:
        self._ops("stop")

    def up(self) -> bool:
        try:
            return httpx.get(f"{self.url}/_cluster/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def remove(self) -> None:
        """Stop the node (if running) and delete its data."""
        if (self.var / "es.pid").exists():
            self.stop()
        shutil.rmtree(self.var, ignore_errors=True)


class PrivateRedis:
    """A ``redis-server`` on a port in ``ports``, append-only like the stack's, in ``data_dir``.
    ``stop`` is SIGTERM (Redis writes its append-only file and exits, as a restart would)."""

    def __init__(
        self, data_dir: Path, ports: tuple[int, int] = (6420, 6430), port: int | None = None
    ) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed (ops/install installs it)")
        self.port = port if port is not None else free_port(*ports)
        self.data_dir = data_dir
        self.password = os.environ.get("MEMQ_REDIS_PASSWORD", "")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Its URL; with the stack's password (``MEMQ_REDIS_PASSWORD``) when one is set, which
        this server then requires too: processes the tests start inherit that variable, and
        memq puts it into any Redis URL that names none."""
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir)]
        args += ["--appendonly", "yes", "--save", ""]
        args += ["--requirepass", self.password] if self.password else []
        with (self.data_dir / "redis.log").open("ab") as log:
            self.process = subprocess.Popen(["redis-server", *args], stdout=log, stderr=log)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("the private redis-server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def free_port_run(count: int, low: int, high: int) -> int:
    """The first port ``p`` in [low, high) with ``p .. p + count - 1`` all free."""
    for base in range(low, high - count + 1):
        try:
            if all(free_port(port, port + 1) == port for port in range(base, base + count)):
                return base
        except RuntimeError:
            continue
    raise RuntimeError(f"no {count} free ports in a row in {low}..{high - 1}")


class PrivateCluster:
    """``ops/cluster`` for a cluster of its own: ``nodes`` nodes on HTTP ports from a run in
    ``http_ports`` and transport ports from a run in ``transport_ports``, data in a fresh
    directory, the stack's distribution. ``kill`` is SIGKILL of one node; ``up`` starts
    whichever nodes are not running and waits for the whole cluster."""

    def __init__(
        self,
        env: dict[str, str],
        nodes: int = 3,
        http_ports: tuple[int, int] = (9440, 9450),
        transport_ports: tuple[int, int] = (9540, 9550),
        heap: str = "512m",
    ) -> None:
        self.nodes = nodes
        self.http_port = free_port_run(nodes, *http_ports)
        self.dir = Path(tempfile.mkdtemp(prefix="memq-cluster-"))
        self.dir.chmod(0o755)  # the nodes run as their own user, which must reach their data
        self.env = {
            **env,
            "MEMQ_OPS_CLUSTER_NODES": str(nodes),
            "MEMQ_OPS_CLUSTER_DIR": str(self.dir),
            "MEMQ_OPS_CLUSTER_NAME": f"memq-test-{self.dir.name[-8:].lower()}",
            "MEMQ_OPS_CLUSTER_HTTP_PORT": str(self.http_port),
            "MEMQ_OPS_CLUSTER_TRANSPORT_PORT": str(free_port_run(nodes, *transport_ports)),
            "MEMQ_OPS_CLUSTER_HEAP": heap,
        }

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.http_port + i}" for i in range(self.nodes)]

    def ops(self, *args: str) -> str:
        """Run ``ops/cluster ARGS``; its output, or RuntimeError naming what it said."""
        done = subprocess.run(
            [str(OPS / "cluster"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"ops/cluster {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def up(self, *nodes: int) -> float:
        """Start the nodes not running and wait for the cluster; the seconds that took."""
        began = time.monotonic()
        self.ops("up", *map(str, nodes))
        return time.monotonic() - began

    def kill(self, node: int) -> None:
        self.ops("kill", str(node))

    def remove(self) -> None:
        """Stop every node (cleanly) and delete the cluster's data."""
        try:
            self.ops("down")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="a private Redis or Elasticsearch, until SIGTERM")
    parser.add_argument("kind", choices=["redis", "elasticsearch"])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, help="default: the first free one of its range")
    args = parser.parse_args(argv)
    # A given port is taken as it is: on a restart it may still be in TIME_WAIT.
    service: PrivateRedis | PrivateElasticsearch
    if args.kind == "redis":
        service = PrivateRedis(args.data_dir, port=args.port)
    else:
        args.data_dir.chmod(0o755)  # the node runs as its own user, which must reach its data
        service = PrivateElasticsearch(dict(os.environ), var=args.data_dir, port=args.port)
    # SIGTERM ends the wait through SystemExit, so the service is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(0))
    try:
        service.start()
        print(f"URL={service.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    finally:
        service.stop()


if __name__ == "__main__":
    main()
