"""An erasure reaches Redis's append-only file: after ``erase_user_everywhere`` the file is
rewritten, and a marker the erased user sent is in none of its files. A private
``redis-server`` (append-only, like the stack's) holds the job states, so the files read are
this test's alone; Elasticsearch is the stack's, under the run's prefix."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pipeline.config import Settings
from pipeline.domain.models import Scope
from pipeline.store.indices import IndexNames
from tests.integration.test_erase import queued_job
from tests.private_services import PrivateRedis
from workers.app import MemqCelery, create_celery
from workers.erase import erase_user_everywhere

pytestmark = pytest.mark.integration


@pytest.fixture
def private_app(
    settings: Settings, indices: IndexNames, tmp_path: Path
) -> Iterator[tuple[MemqCelery, Path]]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        url = server.url
        private = settings.model_copy(
            update={"redis": settings.redis.model_copy(update={"url": url})}
        )
        yield create_celery(private), tmp_path
    finally:
        server.stop()


def files_holding(marker: str, data_dir: Path) -> list[str]:
    return [p.name for p in data_dir.rglob("*.aof") if marker.encode() in p.read_bytes()]


def test_erased_words_leave_the_append_only_file(private_app: tuple[MemqCelery, Path]) -> None:
    app, data_dir = private_app
    marker, user = f"Numbat{uuid.uuid4().hex[:10]}", f"u-{uuid.uuid4().hex[:8]}"
    scope = Scope(tenant=f"disk-{uuid.uuid4().hex[:6]}", user_id=user)
    queued_job(app, scope, marker)  # its state, the request with the marker, in Redis
    client = redis.Redis.from_url(app.runtime.settings.redis.url)
    deadline = time.monotonic() + 10
    while not files_holding(marker, data_dir) and time.monotonic() < deadline:
        time.sleep(0.2)  # written to the file within a second (appendfsync everysec)
    assert files_holding(marker, data_dir), "the job state never reached the file"

    erased = erase_user_everywhere(app.runtime, scope.tenant, user)
    assert erased.erased["job_states"] == 1

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = client.info("persistence")
        rewriting = info["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"]
        if not rewriting and not files_holding(marker, data_dir):
            break
        time.sleep(0.2)
    assert files_holding(marker, data_dir) == []
