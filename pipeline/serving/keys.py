"""API keys: ``mq_<id>_<secret>``, stored as the SHA-256 of the secret (never the secret).

Each key belongs to one tenant. The bootstrap admin key comes from Settings
(``MEMQ_API_ADMIN_KEY``); admins create and revoke tenant keys. A revoked or unknown key and a
wrong secret all fail the same way.

Authentication reads the key's document once per ``cache_s`` seconds per process (a request
otherwise pays an Elasticsearch read before its work). Only keys that exist are cached, so the
cache holds at most one entry per real key whatever callers send. A revocation is seen at once
by the process that made it and within ``cache_s`` by the others. A dict and the monotonic clock
do it; a caching library would be one more dependency for these few lines.

A well-formed key whose id is no key's costs no Elasticsearch read either: each process keeps
the set of key ids (one read of the ids, nothing else), taken while the count of key creations
(``KeyCreations``, a Redis counter every process shares) stood at a value; an id outside the
set is unknown while the count is unchanged. A creation stores its key, then adds one to the
count, so every process reads the ids again before it next judges an id unknown: a new key
works at once everywhere. The set is bounded by the keys that exist, whatever ids callers
send. While the count cannot be read, ids are looked up as before; a creation whose count
could not be added to is seen by the others when their set is ``IDS_MAX_AGE_S`` old.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import redis
from pydantic import SecretStr

from pipeline.adapters.redis_errors import redis_errors
from pipeline.errors import NotFoundError, TransientError
from pipeline.store.protocol import KeyRecords
from pipeline.store.reads import KeyDocument, ListedKey

log = logging.getLogger(__name__)

IDS_MAX_AGE_S = 60.0
"""The longest a process trusts its set of key ids, counted creations or not."""

_TOKEN = re.compile(r"^mq_(?P<id>[0-9a-f]{16})_(?P<secret>[A-Za-z0-9_-]{20,100})$")
ADMIN_TENANT = "_admin"  # reserved: no tenant key can be made for it


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's id, its tenant, and whether it may administer keys."""

    key_id: str
    tenant: str
    admin: bool = False


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyCreations(Protocol):
    """How many keys were ever created, as every process that authenticates sees it."""

    def count(self) -> int:
        """The count; ``TransientError`` when it cannot be read."""
        ...

    def add(self) -> None:
        """Count one more creation; ``TransientError`` when it cannot be written."""
        ...


class RedisKeyCreations:
    """``KeyCreations`` in one Redis counter per deployment (``namespace``: its index prefix)."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.name = f"memq:{namespace}:keys:created"

    def count(self) -> int:
        with redis_errors("read the count of key creations"):
            return int(self.client.get(self.name) or 0)

    def add(self) -> None:
        with redis_errors("count a key creation"):
            self.client.incr(self.name)


@dataclass(frozen=True)
class _KeyIds:
    """The ids of every key, read while creations stood at ``count``."""

    ids: frozenset[str]
    count: int
    read_at: float


class KeyStore:
    """Keys over the store's key documents (``KeyRecords``); its errors pass through."""

    def __init__(
        self,
        records: KeyRecords,
        cache_s: float = 0.0,
        stale_s: float = 0.0,
        creations: KeyCreations | None = None,
    ) -> None:
        self.records = records
        self.cache_s = cache_s
        self.stale_s = stale_s
        self.creations = creations  # None: every id not cached is looked up
        self._cache: dict[str, tuple[float, KeyDocument]] = {}
        self._ids: _KeyIds | None = None
        self._lock = threading.Lock()

    def create(self, tenant: str, name: str, now: datetime, admin: bool = False) -> tuple[str, str]:
        """A new key for ``tenant``: returns (key id, the full token — shown once)."""
        key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        document = KeyDocument(
            tenant=tenant,
            name=name,
            role="admin" if admin else "tenant",
            secret_sha256=_digest(secret),
            created_at=now,
        )
        self.records.create_key(key_id, document)
        self._announce()
        return key_id, f"mq_{key_id}_{secret}"

    def _announce(self) -> None:
        """Count the creation, so that every process reads the key ids again."""
        with self._lock:
            self._ids = None
        if self.creations is None:
            return
        try:
            self.creations.add()
        except TransientError as exc:  # the key is stored: others see it within IDS_MAX_AGE_S
            log.warning("a key was created but not counted (%s)", exc)

    def authenticate(self, token: str, admin_key: SecretStr | None) -> Principal | None:
        """The principal of ``token``, or None when it is not a valid, unrevoked key."""
        if admin_key is not None and hmac.compare_digest(
            token.encode(), admin_key.get_secret_value().encode()
        ):
            return Principal(key_id="admin", tenant=ADMIN_TENANT, admin=True)
        match = _TOKEN.match(token)
        if match is None:
            return None
        stored = self._cached(match.group("id"))
        if stored is None or stored.revoked_at:
            return None
        if not hmac.compare_digest(_digest(match.group("secret")), stored.secret_sha256 or ""):
            return None
        return Principal(
            key_id=match.group("id"), tenant=stored.tenant, admin=stored.role == "admin"
        )

    def principal(self, key_id: str) -> Principal | None:
        """The principal of the tenant key ``key_id`` while it exists and is not revoked (a
        session that authenticated with it once checks this on each request); None else.
        The bootstrap admin key is not a stored key: its holder's sessions check Settings."""
        stored = self._cached(key_id)
        if stored is None or stored.revoked_at:
            return None
        return Principal(key_id=key_id, tenant=stored.tenant, admin=stored.role == "admin")

    def revoke(self, key_id: str, now: datetime) -> None:
        with self._lock:
            self._cache.pop(key_id, None)
        if not self.records.update_key(key_id, {"revoked_at": now.isoformat()}):
            raise NotFoundError(f"no API key {key_id}")

    def list(self, tenant: str | None = None) -> list[ListedKey]:
        """The keys (of ``tenant``), oldest first, without their secrets' hashes."""
        return self.records.list_keys(tenant)

    def _cached(self, key_id: str) -> KeyDocument | None:
        """The key's document, read at most once per ``cache_s`` (only keys that exist). While
        the store cannot be reached, a key read in the last ``stale_s`` still authenticates:
        the store that would hold its revocation is down, so nothing newer can be known, and
        the intake keeps accepting work (docs/ARCHITECTURE.md, the failure model)."""
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key_id)
        if hit is not None and hit[0] > now:
            return hit[1]
        if hit is None and self._surely_unknown(key_id, now):
            return None
        try:
            stored = self.records.get_key(key_id)
        except TransientError:
            if hit is not None and hit[0] + self.stale_s > now:
                return hit[1]
            raise
        if stored is not None and self.cache_s > 0:
            with self._lock:
                self._cache[key_id] = (now + self.cache_s, stored)
        return stored

    def _surely_unknown(self, key_id: str, now: float) -> bool:
        """True when no key has ``key_id``, known from the set of key ids read since the last
        counted creation; False when it may be a key (or the count cannot be read)."""
        if self.creations is None:
            return False
        try:
            count = self.creations.count()  # before the ids: a later creation bumps it again
            known = self._ids
            if known is None or known.count != count or now - known.read_at > IDS_MAX_AGE_S:
                known = _KeyIds(frozenset(self.records.key_ids()), count, now)
                with self._lock:
                    self._ids = known
        except TransientError:
            return False  # cannot tell: the document is read, as it always was
        return key_id not in known.ids
