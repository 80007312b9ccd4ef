"""Fixtures shared by every test. Integration fixtures talk to the real services started by
``ops/up`` and fail loudly (never skip) when one is missing."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.store.client import make_client
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames, drop_indices, ensure_indices
from tests.fakellm import FakeLLMServer
from tests.processes import ApiProcess, MemqProcess, WorkerProcess, free_port
from workers.app import MemqCelery, create_celery

REDIS_PASSWORD_FILE = Path("/var/lib/memq/redis-password")


def pytest_configure(config: pytest.Config) -> None:
    """The stack's Redis password, as ``MEMQ_REDIS_PASSWORD``, for the settings read below and
    the processes the tests start: the environment's, else the one ``ops/redis`` kept (a
    Redis started before ops required one has none)."""
    if not os.environ.get("MEMQ_REDIS_PASSWORD") and REDIS_PASSWORD_FILE.is_file():
        os.environ["MEMQ_REDIS_PASSWORD"] = REDIS_PASSWORD_FILE.read_text().strip()


@pytest.fixture(scope="session")
def stack_settings() -> Settings:
    """The settings of the stack ``ops/up`` started (the environment's)."""
    return Settings()


ADMIN_KEY_FILE = Path("/var/lib/memq/admin-key")


def admin_key() -> str:
    """The stack's bootstrap admin key: ``MEMQ_API_ADMIN_KEY``, else the one ``ops/up`` kept."""
    key = os.environ.get("MEMQ_API_ADMIN_KEY")
    if key:
        return key
    try:
        return ADMIN_KEY_FILE.read_text().strip()
    except OSError as exc:
        pytest.fail(f"no admin key: set MEMQ_API_ADMIN_KEY or create {ADMIN_KEY_FILE} ({exc})")


@contextmanager
def running(process: MemqProcess, wait_ready: Callable[[], None]) -> Iterator[None]:
    """``process`` started and ready for the block (the test run fails, naming why, when it
    does not get ready), stopped after it."""
    process.start()
    try:
        wait_ready()
    except RuntimeError as exc:
        process.stop()
        pytest.fail(str(exc))
    try:
        yield
    finally:
        process.stop()


@pytest.fixture(scope="session")
def test_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[FakeLLMServer]:
    """The scripted OpenAI-compatible server: the only fake in the integration tests (the
    model); memq's own client code talks to it over real HTTP."""
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="session")
def test_env(stack_settings: Settings, test_id: str, fake_llm: FakeLLMServer) -> dict[str, str]:
    """Environment for memq processes the tests start: same services, private names, the
    scripted LLM, and short timeouts so retries and redeliveries happen within a test."""
    inherited = {k: v for k, v in os.environ.items() if k != "MEMQ_ES_URLS"}  # one source: URL
    return {
        **inherited,
        "MEMQ_ES_URL": ",".join(stack_settings.es.urls),
        "MEMQ_REDIS_URL": stack_settings.redis.url,
        "MEMQ_ES_INDEX_PREFIX": f"memqtest-{test_id}",
        "MEMQ_QUEUES_IO": f"test-{test_id}.io",
        "MEMQ_QUEUES_CPU": f"test-{test_id}.cpu",
        "MEMQ_QUEUES_BACKFILL": f"test-{test_id}.backfill",
        "MEMQ_LLM_BASE_URL": fake_llm.base_url,
        "MEMQ_LLM_MODEL": "scripted",
        "MEMQ_LLM_TIMEOUT_S": "2",
        "MEMQ_LLM_MAX_RETRIES": "2",
        "MEMQ_WORKER_RETRY_BACKOFF_S": "1",
        "MEMQ_WORKER_RETRY_BACKOFF_MAX_S": "2",
        "MEMQ_WORKER_TASK_SOFT_TIME_LIMIT_S": "20",
        "MEMQ_WORKER_TASK_TIME_LIMIT_S": "25",
        "MEMQ_WORKER_VISIBILITY_TIMEOUT_S": "30",
        "MEMQ_CHAT_DEBOUNCE_S": "1",
    }


@pytest.fixture(scope="session")
def settings(test_env: dict[str, str], monkeypatch_session: pytest.MonkeyPatch) -> Settings:
    """Settings with a private index prefix and private queues, so tests never touch real data."""
    for key, value in test_env.items():
        if key.startswith("MEMQ_"):
            monkeypatch_session.setenv(key, value)
    return Settings()


@pytest.fixture(scope="session")
def monkeypatch_session() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="session")
def es(stack_settings: Settings) -> Elasticsearch:
    client = make_client(stack_settings.es)
    try:
        client.cluster.health(wait_for_status="yellow", timeout="10s")
    except Exception as exc:
        pytest.fail(
            f"Elasticsearch is not reachable at {stack_settings.es.url}: run ops/up ({exc})"
        )
    return client


@pytest.fixture(scope="session")
def redis_client(stack_settings: Settings) -> redis.Redis:
    client = redis.Redis.from_url(stack_settings.redis.url)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {stack_settings.redis.url}: run ops/up ({exc})")
    return client


@pytest.fixture(scope="session")
def indices(es: Elasticsearch, settings: Settings) -> Iterator[IndexNames]:
    """memq's indices under the test prefix, dropped at the end of the session."""
    names = ensure_indices(es, settings.es, settings.embedder.dims)
    yield names
    drop_indices(es, names)


@pytest.fixture(scope="session")
def celery_app(settings: Settings, redis_client: redis.Redis) -> Iterator[MemqCelery]:
    """A producer-side app over the test queues (the worker fixture consumes them)."""
    app = create_celery(settings)
    yield app
    app.close()


@pytest.fixture(scope="session")
def worker(
    test_env: dict[str, str],
    celery_app: MemqCelery,
    indices: IndexNames,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WorkerProcess]:
    """A real ``memq worker`` process consuming the test queues over the real Redis; its
    Prometheus metrics are served on ``MEMQ_WORKER_METRICS_PORT`` of its ``env``."""
    env = {**test_env, "MEMQ_WORKER_METRICS_PORT": str(free_port())}
    process = WorkerProcess(env, tmp_path_factory.mktemp("worker") / "worker.log")
    with running(process, lambda: process.wait_ready(celery_app)):
        yield process


@pytest.fixture
def store(celery_app: MemqCelery, worker: WorkerProcess) -> ElasticStore:
    """The test app's store, with the worker running the jobs it is sent (a module reading a
    store of its own defines its own ``store``)."""
    return celery_app.runtime.store


@contextmanager
def api_running(env: dict[str, str], log_dir: Path) -> Iterator[ApiProcess]:
    """A real ``memq api`` process of this checkout with ``env`` on a free port, the admin key
    the stack's, ready for the block and stopped after it."""
    env = {**env, "MEMQ_API_PORT": str(free_port()), "MEMQ_API_ADMIN_KEY": admin_key()}
    process = ApiProcess(env, log_dir / "api.log")
    with running(process, process.wait_ready):
        yield process


@pytest.fixture(scope="session")
def api_process(
    test_env: dict[str, str], worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiProcess]:
    """The API over the test indices and queues (the worker fixture consumes them)."""
    with api_running(test_env, tmp_path_factory.mktemp("api")) as process:
        yield process


@pytest.fixture(scope="session")
def api_url(api_process: ApiProcess) -> str:
    return api_process.url
