"""Workers on other hosts need nothing but settings: two ``memq worker`` processes, each in a
network namespace of its own (its own interfaces, routes and loopback, as on another machine),
consume the same queues and reach Redis, Elasticsearch and the model at one address given in
their settings, and between them run every job exactly once.

The namespaces are linked by veth pairs to a bridge in a third namespace, "the services host",
which answers at SERVICES_IP: there, ``socat`` relays each port to the real service on this
machine's loopback through a Unix socket (a file, which namespaces share). Nothing in the root
namespace gets an address; every packet a worker sends goes to a namespace this test made.
Needs root, ``ip`` and ``socat`` (ops/install installs it); marked ``cluster``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import pytest
from elasticsearch import Elasticsearch

from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.store.indices import Kind, drop_indices, ensure_indices
from tests.conftest import running
from tests.fakellm import FakeLLMServer
from tests.integration.test_node_loss import settings_of
from tests.integration.test_pipeline import facts_from_conversation
from tests.private_services import private_memq_env
from tests.processes import WorkerProcess
from workers.app import MemqCelery, create_celery
from workers.intake import submit

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

SUBNET = "10.77.0"  # inside the test's own namespaces only
SERVICES_IP = f"{SUBNET}.1"
SESSIONS, JOBS_PER_SESSION = 12, 2
TIMEOUT_S = 180.0


def ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Hosts:
    """Namespaces ``<tag>s`` (services, a bridge at SERVICES_IP) and ``<tag>1``, ``<tag>2``
    (workers, SUBNET.11 and .12), and the relays that serve the services host's ports."""

    tag: str = field(default_factory=lambda: f"mq{uuid.uuid4().hex[:5]}")
    sockets: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="memq-hosts-")))
    relays: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def services(self) -> str:
        return f"{self.tag}s"

    def worker_ns(self, n: int) -> str:
        return f"{self.tag}{n}"

    def build(self, workers: int) -> None:
        ip("netns", "add", self.services)
        ip("-n", self.services, "link", "set", "lo", "up")
        ip("-n", self.services, "link", "add", "br0", "type", "bridge")
        ip("-n", self.services, "addr", "add", f"{SERVICES_IP}/24", "dev", "br0")
        ip("-n", self.services, "link", "set", "br0", "up")
        for n in range(1, workers + 1):
            ns, peer = self.worker_ns(n), f"{self.tag}p{n}"
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            nic = f"{self.tag}w{n}"
            ip("link", "add", nic, "netns", ns, "type", "veth", "peer", "name", peer, "netns",
               self.services)  # fmt: skip
            ip("-n", self.services, "link", "set", peer, "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{SUBNET}.{10 + n}/24", "dev", nic)
            ip("-n", ns, "link", "set", nic, "up")

    def relay(self, name: str, port: int) -> None:
        """Serve 127.0.0.1:``port`` of this machine at SERVICES_IP:``port``."""
        sock = self.sockets / f"{name}.sock"
        with (self.sockets / f"{name}.log").open("ab") as log:
            self._spawn([f"UNIX-LISTEN:{sock},fork", f"TCP:127.0.0.1:{port}"], log)
            self._wait_for(sock)
            listen = f"TCP-LISTEN:{port},bind={SERVICES_IP},fork,reuseaddr"
            self._spawn([listen, f"UNIX-CONNECT:{sock}"], log, netns=self.services)

    def _spawn(self, args: list[str], log: BinaryIO, netns: str | None = None) -> None:
        prefix = ["ip", "netns", "exec", netns] if netns else []
        self.relays.append(subprocess.Popen([*prefix, "socat", *args], stdout=log, stderr=log))

    @staticmethod
    def _wait_for(path: Path) -> None:
        deadline = time.monotonic() + 10
        while not path.exists():
            assert time.monotonic() < deadline, f"{path} never appeared"
            time.sleep(0.05)

    def can_reach(self, ns: str, host: str, port: int) -> bool:
        """A TCP connection from namespace ``ns`` to host:port succeeds."""
        probe = f"exec 3<>/dev/tcp/{host}/{port}"
        done = subprocess.run(["ip", "netns", "exec", ns, "bash", "-c", probe], check=False,
                              capture_output=True, timeout=20)  # fmt: skip
        return done.returncode == 0

    def remove(self, workers: int) -> None:
        for relay in self.relays:
            relay.terminate()
            relay.wait(timeout=10)
        for ns in [self.worker_ns(n) for n in range(1, workers + 1)] + [self.services]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        shutil.rmtree(self.sockets, ignore_errors=True)


class HostWorker(WorkerProcess):
    """``memq worker`` run inside a network namespace, under a node name of its own."""

    def __init__(self, env: dict[str, str], log_path: Path, netns: str) -> None:
        super().__init__(env, log_path, concurrency=1)
        self.netns = netns

    def argv(self) -> list[str]:
        return ["worker", "--concurrency=1", f"--hostname=memq-{self.netns}@%h", "--loglevel=INFO"]

    def _spawn(self, log: BinaryIO) -> None:
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, sys.executable, "-m", "memq.cli", *self.argv()],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def jobs_run(self) -> int:
        """Tasks this worker finished, as its log says."""
        return self.log_path.read_text(errors="replace").count("succeeded in")


@dataclass
class TwoHosts:
    app: MemqCelery
    es: Elasticsearch
    hosts: Hosts
    workers: list[HostWorker]


@pytest.fixture(scope="module")
def two_hosts(
    test_env: dict[str, str],
    es: Elasticsearch,
    monkeypatch_session: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TwoHosts]:
    missing = [tool for tool in ("ip", "socat") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} missing: run ops/install (as root)")
    tag = uuid.uuid4().hex[:8]
    logs = tmp_path_factory.mktemp("worker-hosts")
    hosts = Hosts()
    with FakeLLMServer() as model:
        model.responder = facts_from_conversation
        here = private_memq_env(test_env, tag, model.base_url)
        settings = settings_of(here, monkeypatch_session)
        names = ensure_indices(es, settings.es, settings.embedder.dims)
        app = create_celery(settings)
        try:
            hosts.build(workers=2)
            there = elsewhere(here, hosts, model)
            workers = [HostWorker(there, logs / f"w{n}.log", hosts.worker_ns(n)) for n in (1, 2)]
            with (
                running(workers[0], lambda: workers[0].wait_ready(app, timeout_s=120)),
                running(workers[1], lambda: workers[1].wait_ready(app, timeout_s=120)),
            ):
                yield TwoHosts(app, es, hosts, workers)
        finally:
            app.close()
            hosts.remove(workers=2)
            drop_indices(es, names)


def elsewhere(env: dict[str, str], hosts: Hosts, model: FakeLLMServer) -> dict[str, str]:
    """``env`` as a worker on another host has it: every service at SERVICES_IP, relayed."""
    redis_url, es_url = urlsplit(env["MEMQ_REDIS_URL"]), urlsplit(env["MEMQ_ES_URL"].split(",")[0])
    llm_port = urlsplit(model.base_url).port
    assert redis_url.port and es_url.port and llm_port
    for name, port in (("redis", redis_url.port), ("es", es_url.port), ("llm", llm_port)):
        hosts.relay(name, port)
    model_url = model.base_url.replace(f"127.0.0.1:{llm_port}", f"{SERVICES_IP}:{llm_port}")
    return {
        **env,
        "MEMQ_REDIS_URL": f"redis://{SERVICES_IP}:{redis_url.port}{redis_url.path}",
        "MEMQ_ES_URL": f"http://{SERVICES_IP}:{es_url.port}",
        "MEMQ_LLM_BASE_URL": model_url,
        "MEMQ_EMBEDDER_BASE_URL": model_url,
    }


def conversation(scope: Scope, job: int) -> AddRequest:
    text = "\n".join(f"fact: {scope.user_id} job {job} thing {n}" for n in range(2))
    return AddRequest(scope=scope, messages=[MessageIn(role="user", content=text)])


def test_two_workers_in_their_own_network_namespaces_share_the_queues(two_hosts: TwoHosts) -> None:
    hosts = two_hosts.hosts
    for n in (1, 2):  # another host: this machine's loopback services are not there
        assert not hosts.can_reach(hosts.worker_ns(n), "127.0.0.1", 6379)
        assert hosts.can_reach(hosts.worker_ns(n), SERVICES_IP, 6379)

    tenant = f"hosts-{uuid.uuid4().hex[:8]}"
    scopes = [Scope(tenant=tenant, user_id=f"u{i}") for i in range(SESSIONS)]
    requests = [conversation(s, job) for job in range(JOBS_PER_SESSION) for s in scopes]
    jobs = [submit(two_hosts.app, request).record.job_id for request in requests]

    store = two_hosts.app.runtime.store
    deadline = time.monotonic() + TIMEOUT_S
    while any((r := store.get_job(j)) is None or not r.ended for j in jobs):
        assert time.monotonic() < deadline, [w.tail() for w in two_hosts.workers]
        time.sleep(0.5)
    records = [store.get_job(job) for job in jobs]
    assert all(r is not None and r.status == "succeeded" for r in records), records
    assert all(worker.jobs_run() > 0 for worker in two_hosts.workers), [
        worker.jobs_run() for worker in two_hosts.workers
    ]

    index = store.names.alias(Kind.MEMORIES)
    two_hosts.es.indices.refresh(index=index)
    hits = two_hosts.es.search(index=index, query={"term": {"tenant": tenant}}, size=1000)
    texts = [hit["_source"]["text"] for hit in hits["hits"]["hits"]]
    assert len(texts) == 2 * len(jobs) and len(set(texts)) == len(texts)
