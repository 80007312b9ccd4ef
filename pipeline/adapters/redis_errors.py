"""The one place redis-py's failures become memq's: ``TransientError`` (Redis down or busy,
worth a retry). Used by the workers' state and by the API's tenant limits alike."""

from __future__ import annotations

import redis

from pipeline.errors import TransientError


class redis_errors:  # noqa: N801 - used as a context manager, like contextlib's
    """Translate redis-py failures into ``TransientError`` (Redis down or busy: retry)."""

    def __init__(self, action: str) -> None:
        self.action = action

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if isinstance(exc, redis.RedisError):
            raise TransientError(f"{self.action}: Redis {exc.__class__.__name__}: {exc}") from exc
