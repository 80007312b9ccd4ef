"""The task registry: every memq task, with its explicit name, registered on one app."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from pipeline.health import elasticsearch_health
from workers.names import HEALTH_TASK

if TYPE_CHECKING:
    from workers.app import MemqCelery


def register_tasks(app: MemqCelery) -> None:
    """Register memq's tasks on ``app``; each is a thin adapter over a pipeline function."""
    runtime = app.runtime

    @app.task(name=HEALTH_TASK, acks_late=False)
    def health() -> dict[str, Any]:
        """Prove a worker is consuming: report its host and what it sees of Elasticsearch."""
        return {"worker": socket.gethostname(), "elasticsearch": elasticsearch_health(runtime.es)}
