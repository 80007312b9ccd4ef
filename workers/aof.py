"""Redis's append-only file after an erasure.

The file keeps every write, deleted keys' values included, until it is rewritten, which Redis
does on its own only once it has doubled past 64 MB: an erased user's words (their jobs' states)
could stay on disk indefinitely. After an erasure the file is rewritten (``BGREWRITEAOF``: a
fork writes the live dataset only, and the old files are removed), at most once per
``AOF_REWRITE_INTERVAL_S`` per Redis server; an erasure inside that interval is taken up by the
reaper (every ``MEMQ_WORKER_REAPER_INTERVAL_S``) once the interval has passed. So erased data
leaves the file within about ``AOF_REWRITE_INTERVAL_S`` + the reaper's interval + the rewrite.
"""

from __future__ import annotations

import redis

AOF_ERASED = "memq:aof:erased"  # per server, like the file: no deployment prefix
AOF_GUARD = "memq:aof:rewritten"
AOF_REWRITE_INTERVAL_S = 60


def erased_from_redis(client: redis.Redis) -> None:
    """Note that the append-only file holds erased data, and rewrite it when due."""
    client.set(AOF_ERASED, 1)
    rewrite_aof_if_due(client)


def rewrite_aof_if_due(client: redis.Redis) -> bool:
    """Start ``BGREWRITEAOF`` when an erasure is pending, append-only persistence is on, no
    rewrite is under way and none started within ``AOF_REWRITE_INTERVAL_S``; True if started.
    A rewrite started before the erasure's deletions may still copy their values, hence the
    pending flag is cleared only when a rewrite starts after it."""
    if not client.exists(AOF_ERASED):
        return False
    info = client.info("persistence")
    if not info.get("aof_enabled"):
        client.delete(AOF_ERASED)
        return False
    if info.get("aof_rewrite_in_progress") or info.get("aof_rewrite_scheduled"):
        return False
    if not client.set(AOF_GUARD, 1, nx=True, ex=AOF_REWRITE_INTERVAL_S):
        return False
    client.delete(AOF_ERASED)
    client.bgrewriteaof()
    return True
