"""Per-process resources shared by the tasks of one worker: settings and lazily built clients."""

from __future__ import annotations

from functools import cached_property

from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.store.client import make_client


class Runtime:
    """What a task needs besides its message. Clients are built on first use, per process,
    so a forked worker child never shares a connection with its parent."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def es(self) -> Elasticsearch:
        return make_client(self.settings.es)
