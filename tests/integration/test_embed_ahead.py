"""New turns embedded ahead: a job waiting behind its session's running job has its turn
embedded while that job runs, kept in the real Redis, and its retrieval finds the vector
instead of calling the model."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
import redis

from pipeline.adapters.embedding.shared import SharedVectors
from pipeline.adapters.nlp.entities import RuleEntityExtractor
from pipeline.adapters.nlp.lemmatize import SimplemmaLemmatizer
from pipeline.config import Settings
from pipeline.domain.jobs import JobStatus
from pipeline.domain.models import Scope
from pipeline.domain.state import JobState
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases.retrieve import (
    embed_queries_ahead,
    new_turn_text,
    retrieve_existing_batch,
)
from pipeline.store.elastic import ElasticStore
from pipeline.store.memory import InMemoryStore
from pipeline.store.protocol import MemoryDoc
from tests.doubles import HashEmbedder
from tests.fakellm import FakeLLMServer
from tests.integration.test_batches import ask, ready, scope, wait_job
from tests.integration.test_pipeline import facts_from_conversation
from tests.processes import free_port
from workers.app import MemqCelery
from workers.names import GATHER_TASK
from workers.scheduler.batches import BACKFILL, LIVE

pytestmark = pytest.mark.integration

MODEL = "hash:384"


def float32(vectors: list[list[float]]) -> list[list[float]]:
    return np.asarray(vectors, dtype="<f4").tolist()


def private_prefix() -> str:
    return f"memqtest-{uuid.uuid4().hex[:8]}"


def test_a_vector_embedded_ahead_is_taken_once_by_any_process_of_the_same_model(
    redis_client: redis.Redis, stack_settings: Settings
) -> None:
    model = HashEmbedder()
    vectors = SharedVectors(model, redis_client, private_prefix(), MODEL)
    assert vectors.embed_ahead(["Ann keeps bees", "Bo builds boats", "Ann keeps bees"]) == 2
    assert vectors.embed_ahead(["Bo builds boats"]) == 0  # kept already: no model call
    assert model.calls == [["Ann keeps bees", "Bo builds boats"]]
    assert 0 < redis_client.ttl(vectors.key("Ann keeps bees")) <= 900
    # vectors of another model are never taken for this one's
    third_model = HashEmbedder()
    SharedVectors(third_model, redis_client, vectors.prefix, "hash:v2").embed(["Ann keeps bees"])
    assert third_model.calls == [["Ann keeps bees"]]
    # another process (a client and a model of its own) takes them, once
    other_model = HashEmbedder()
    client = redis.Redis.from_url(stack_settings.redis.url)
    other = SharedVectors(other_model, client, vectors.prefix, MODEL)
    texts = ["Bo builds boats", "Cy plays oboe", "Ann keeps bees"]
    assert other.embed(texts) == float32(HashEmbedder().embed(texts))
    assert other_model.calls == [["Cy plays oboe"]]
    assert not redis_client.exists(vectors.key("Ann keeps bees"), vectors.key("Bo builds boats"))
    other.embed(["Ann keeps bees"])
    assert other_model.calls == [["Cy plays oboe"], ["Ann keeps bees"]]


def test_redis_out_of_reach_costs_the_model_call_and_nothing_else() -> None:
    model = HashEmbedder()
    gone = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5)
    vectors = SharedVectors(model, gone, private_prefix(), MODEL)
    assert vectors.embed_ahead(["Ann keeps bees"]) == 1
    assert vectors.embed(["Ann keeps bees"]) == float32(HashEmbedder().embed(["Ann keeps bees"]))
    assert model.calls == [["Ann keeps bees"], ["Ann keeps bees"]]


def test_retrieval_of_a_turn_embedded_ahead_calls_no_model(redis_client: redis.Redis) -> None:
    model = HashEmbedder()
    store = InMemoryStore()
    in_scope = Scope(tenant="t", user_id="cy")
    store.create_memories([memory_doc(in_scope, "Cy plays oboe", HashEmbedder())])
    queries = SharedVectors(model, redis_client, private_prefix(), MODEL)
    deps = Deps(
        store=store,
        embedder=model,
        queries=queries,
        lemmatizer=SimplemmaLemmatizer(),
        entities=RuleEntityExtractor(),
        llm=None,
    )
    state = JobState(
        job_id="j1", request=ask(in_scope, "Cy plays bassoon"), received_at=datetime.now(UTC)
    )
    assert embed_queries_ahead([state], deps) == 1
    assert model.calls == [["fact: Cy plays bassoon"]]
    result = retrieve_existing_batch([state], deps)
    assert [m.text for m in result.states[0].existing] == ["Cy plays oboe"]
    assert model.calls == [["fact: Cy plays bassoon"]]  # retrieval took the vector
    assert not redis_client.exists(queries.key("fact: Cy plays bassoon"))
    # without a query embedder that keeps vectors, nothing is embedded ahead
    plain = Deps(**{**deps.__dict__, "queries": None})
    assert embed_queries_ahead([state], plain) == 0


def memory_doc(in_scope: Scope, text: str, model: HashEmbedder) -> MemoryDoc:
    now = datetime.now(UTC)
    return MemoryDoc(
        id=uuid.uuid4().hex,
        scope=in_scope,
        text=text,
        text_lemmatized=text.lower(),
        embedding=model.embed([text])[0],
        hash=uuid.uuid4().hex,
        job_id="earlier",
        created_at=now,
        observed_at=now,
    )


@pytest.fixture
def held(fake_llm: FakeLLMServer) -> Iterator[threading.Event]:
    """The scripted model holds its answer to a conversation saying 'slowly' until the event
    is set (at most 1.5 s: the tests' LLM timeout is 2 s)."""
    release = threading.Event()

    def responder(request: dict[str, Any]) -> str:
        if "slowly" in request["messages"][-1]["content"].split("New messages:", 1)[-1]:
            release.wait(1.5)
        return facts_from_conversation(request)

    fake_llm.reset()
    fake_llm.responder = responder
    yield release
    release.set()
    fake_llm.reset()


@pytest.mark.parametrize("lane", [LIVE, BACKFILL])
def test_the_next_job_of_a_live_session_is_embedded_while_the_one_ahead_runs(
    celery_app: MemqCelery,
    store: ElasticStore,
    settings: Settings,
    redis_client: redis.Redis,
    fake_llm: FakeLLMServer,
    held: threading.Event,
    lane: str,
) -> None:
    """Two jobs of one session made ready together: the batch runs the first. In the live
    lane the second, behind it, has its turn embedded by the worker while the first waits on
    the model, and the vector is the model's; a backfill's is not (its batches keep the CPU
    worker busy). Either way the second then runs with the first's memory among the existing
    ones, and nothing is left kept."""
    line = scope()
    tag = uuid.uuid4().hex[:6]
    ahead = ready(celery_app, ask(line, f"Cy plays oboe {tag} slowly"), lane)
    behind_request = ask(line, f"Cy plays bassoon {tag}")
    behind = ready(celery_app, behind_request, lane)
    key = celery_app.runtime.shared_vectors(HashEmbedder()).key(new_turn_text(behind_request))
    celery_app.send_task(GATHER_TASK, args=(lane,), queue=settings.queues.io)
    deadline = time.monotonic() + 1.4
    while not redis_client.exists(key) and time.monotonic() < deadline:
        time.sleep(0.02)
    kept = redis_client.get(key)
    ahead_record = store.get_job(ahead)
    held.set()
    assert ahead_record is not None and ahead_record.status is JobStatus.RUNNING
    if lane == LIVE:
        assert kept is not None, "the waiting job's turn was not embedded while the first ran"
        model = celery_app.runtime.deps.embedder.embed([new_turn_text(behind_request)])[0]
        assert np.allclose(np.frombuffer(kept, dtype="<f4"), model, atol=1e-5)
    else:
        assert kept is None
    first, second = wait_job(store, ahead), wait_job(store, behind)
    assert first.status == second.status == JobStatus.SUCCEEDED
    assert second.counts["batch_size"] == 1
    prompts = [r["messages"][-1]["content"] for r in fake_llm.chat_requests()]
    behind_prompt = next(p for p in prompts if f"bassoon {tag}" in p.split("New messages:")[-1])
    assert f"Cy plays oboe {tag} slowly" in behind_prompt.split("New messages:")[0]
    assert not redis_client.exists(key)  # retrieval took it
