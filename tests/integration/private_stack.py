"""A worker and an API process over an index prefix and queues of their own, with an admin
client: what the reprocess tests run against (each test its own, dropped after it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.store.indices import IndexNames, drop_indices
from tests.conftest import admin_key, running
from tests.integration.test_api import http_client
from tests.processes import ApiProcess, WorkerProcess, free_port
from workers.app import MemqCelery, create_celery


@dataclass
class PrivateStack:
    env: dict[str, str]
    names: IndexNames
    api_url: str
    admin: httpx.Client
    worker: WorkerProcess
    app: MemqCelery


@contextmanager
def private_stack(
    test_env: dict[str, str],
    settings: Settings,
    es: Elasticsearch,
    logs: Path,
    tag: str,
    extra_env: dict[str, str],
) -> Iterator[PrivateStack]:
    """The processes started with ``test_env`` and ``extra_env`` over a prefix and queues
    named by ``tag`` and a random suffix; every index of the prefix deleted after."""
    run = f"{tag}{uuid.uuid4().hex[:6]}"
    env = {
        **test_env,
        "MEMQ_ES_INDEX_PREFIX": f"{test_env['MEMQ_ES_INDEX_PREFIX']}-{run}",
        "MEMQ_QUEUES_IO": f"{run}.io",
        "MEMQ_QUEUES_CPU": f"{run}.cpu",
        "MEMQ_QUEUES_BACKFILL": f"{run}.backfill",
        "MEMQ_API_PORT": str(free_port()),
        "MEMQ_API_ADMIN_KEY": admin_key(),
        **extra_env,
    }
    private = settings.model_copy(
        update={
            "es": settings.es.model_copy(update={"index_prefix": env["MEMQ_ES_INDEX_PREFIX"]}),
            "queues": settings.queues.model_copy(
                update={"io": env["MEMQ_QUEUES_IO"], "cpu": env["MEMQ_QUEUES_CPU"],
                        "backfill": env["MEMQ_QUEUES_BACKFILL"]}
            ),
        }
    )  # fmt: skip
    names = IndexNames(private.es.index_prefix)
    app = create_celery(private)
    worker = WorkerProcess(env, logs / "worker.log")
    api = ApiProcess(env, logs / "api.log")
    try:
        with (
            running(worker, lambda: worker.wait_ready(app)),
            running(api, api.wait_ready),
            http_client(api.url, admin_key()) as admin,
        ):
            yield PrivateStack(env, names, api.url, admin, worker, app)
    finally:
        app.close()
        drop_indices(es, names)
        for index in es.indices.get(index=f"{names.prefix}-*").body:
            es.indices.delete(index=index)
