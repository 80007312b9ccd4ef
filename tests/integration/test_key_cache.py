"""The key store's per-process cache against the real node: a key is read once per window, a
revocation made through the same store is seen at once, and one made elsewhere within the
window; unknown keys are never cached, and cost no read once the process knows every key id."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
import redis
from elasticsearch import Elasticsearch

from pipeline.config import Settings
from pipeline.serving.keys import KeyStore, RedisKeyCreations
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import IndexNames

pytestmark = pytest.mark.integration


def counted(es: Elasticsearch, indices: IndexNames, cache_s: float = 0.0) -> KeyStore:
    """A key store that counts the keys it creates, as every process of a deployment does (the
    API processes' stores know an id outside their set of key ids is unknown until a creation
    is counted)."""
    client = redis.Redis.from_url(Settings().redis.url)
    creations = RedisKeyCreations(client, indices.prefix)
    return KeyStore(ElasticStore(es, indices), cache_s=cache_s, creations=creations)


def new_key(es: Elasticsearch, indices: IndexNames) -> tuple[str, str]:
    return counted(es, indices).create(f"cache-{uuid.uuid4().hex[:8]}", "cache", datetime.now(UTC))


def revoke_elsewhere(es: Elasticsearch, indices: IndexNames, key_id: str) -> None:
    """What another API process's revocation leaves in the index."""
    KeyStore(ElasticStore(es, indices)).revoke(key_id, datetime.now(UTC))


def test_a_cached_key_sees_a_revocation_elsewhere_only_after_its_window(
    es: Elasticsearch, indices: IndexNames
) -> None:
    key_id, token = new_key(es, indices)
    cached, uncached = (
        KeyStore(ElasticStore(es, indices), cache_s=300),
        KeyStore(ElasticStore(es, indices), cache_s=0),
    )
    assert cached.authenticate(token, None) is not None
    assert uncached.authenticate(token, None) is not None
    revoke_elsewhere(es, indices, key_id)
    assert uncached.authenticate(token, None) is None  # read on every request
    assert cached.authenticate(token, None) is not None  # trusted until its window ends
    cached._cache[key_id] = (0.0, cached._cache[key_id][1])  # the window has passed
    assert cached.authenticate(token, None) is None


def test_a_revocation_through_the_same_store_is_seen_at_once(
    es: Elasticsearch, indices: IndexNames
) -> None:
    key_id, token = new_key(es, indices)
    keys = KeyStore(ElasticStore(es, indices), cache_s=300)
    principal = keys.authenticate(token, None)
    assert principal is not None and principal.key_id == key_id
    keys.revoke(key_id, datetime.now(UTC))
    assert keys.authenticate(token, None) is None


def test_a_wrong_secret_is_refused_from_the_cache_and_unknown_keys_are_not_cached(
    es: Elasticsearch, indices: IndexNames
) -> None:
    key_id, token = new_key(es, indices)
    keys = KeyStore(ElasticStore(es, indices), cache_s=300)
    assert keys.authenticate(token, None) is not None
    assert keys.authenticate(token[:-4] + "AAAA", None) is None
    unknown = f"mq_{uuid.uuid4().hex[:16]}_{'x' * 43}"
    assert keys.authenticate(unknown, None) is None
    assert list(keys._cache) == [key_id]


def key_reads(es: Elasticsearch, indices: IndexNames) -> int:
    """Reads of key documents by id on the keys index so far (its own statistics)."""
    stats = es.indices.stats(index=indices.keys, metric="get")
    return int(stats["_all"]["total"]["get"]["total"])


def test_unknown_keys_cost_no_read_and_a_key_made_elsewhere_works_at_once(
    es: Elasticsearch, indices: IndexNames
) -> None:
    here, elsewhere = (counted(es, indices, cache_s=300) for _ in range(2))
    unknown = [f"mq_{uuid.uuid4().hex[:16]}_{'x' * 43}" for _ in range(30)]
    assert here.authenticate(unknown[0], None) is None  # reads the key ids once
    before = key_reads(es, indices)
    assert all(here.authenticate(token, None) is None for token in unknown)
    assert key_reads(es, indices) == before
    key_id, token = elsewhere.create(f"cache-{uuid.uuid4().hex[:8]}", "cache", datetime.now(UTC))
    principal = here.authenticate(token, None)
    assert principal is not None and principal.key_id == key_id
    assert len(here._ids.ids if here._ids else ()) >= 1


def test_without_the_creation_count_unknown_keys_are_read_and_refused(
    es: Elasticsearch, indices: IndexNames
) -> None:
    """Redis unreachable: an unknown id is looked up, as before, and still refused."""
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    creations = RedisKeyCreations(down, indices.prefix)
    keys = KeyStore(ElasticStore(es, indices), cache_s=300, creations=creations)
    before = key_reads(es, indices)
    assert keys.authenticate(f"mq_{uuid.uuid4().hex[:16]}_{'x' * 43}", None) is None
    assert key_reads(es, indices) == before + 1
    _, token = new_key(es, indices)
    assert keys.authenticate(token, None) is not None
