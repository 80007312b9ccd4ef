"""Both embedders: the local ONNX model (real, offline) and the OpenAI-compatible client over
real HTTP against the scripted server (which stands in for the model only)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from pipeline.adapters.embedding import make_embedder
from pipeline.adapters.embedding.local import (
    RUN_SLACK,
    RUN_SLACK_TOKENS,
    RUN_TOKENS,
    MiniLMEmbedder,
    length_runs,
)
from pipeline.adapters.embedding.remote import OpenAIEmbedder
from pipeline.config import EmbedderConfig, Settings
from pipeline.errors import ConfigurationError, PermanentError, TransientError
from tests.fakellm import Fail, FakeLLMServer


@pytest.fixture(scope="module")
def local() -> MiniLMEmbedder:
    return MiniLMEmbedder(EmbedderConfig(batch_size=4))


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_the_local_model_makes_unit_vectors_that_know_meaning(local: MiniLMEmbedder) -> None:
    cat, kitten, tax = local.embed(
        ["a cat sleeps on the sofa", "a kitten naps on the couch", "file your tax return"]
    )
    assert len(cat) == local.dims == 384
    assert all(abs(math.sqrt(cosine(v, v)) - 1) < 1e-4 for v in (cat, kitten, tax))
    assert cosine(cat, kitten) > cosine(cat, tax) + 0.3


def test_the_local_model_batches_without_changing_results(local: MiniLMEmbedder) -> None:
    texts = [f"memory number {i} about hiking" for i in range(10)]
    batched = local.embed(texts)
    alone = [local.embed([t])[0] for t in texts]
    assert all(cosine(a, b) > 0.9999 for a, b in zip(batched, alone, strict=True))


def test_a_worker_process_gets_its_share_of_the_cores_and_the_same_vectors(
    local: MiniLMEmbedder,
) -> None:
    from memq.cli import share_cores

    shared = share_cores(Settings(), processes=256)
    assert shared.embedder.threads == 1
    assert (
        share_cores(shared.model_copy(), processes=1).embedder.threads == 1
    )  # an explicit choice stays
    one_thread = MiniLMEmbedder(shared.embedder)
    text = ["Caroline went hiking in the Alps with her sister in May 2021."]
    assert cosine(local.embed(text)[0], one_thread.embed(text)[0]) > 0.9999


def test_the_local_model_refuses_other_dims() -> None:
    with pytest.raises(ConfigurationError, match="384"):
        MiniLMEmbedder(EmbedderConfig(dims=768))


def test_settings_choose_the_embedder() -> None:
    assert isinstance(make_embedder(Settings()), MiniLMEmbedder)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(dims=8) as running:
        yield running


def remote(server: FakeLLMServer, batch_size: int = 2) -> OpenAIEmbedder:
    config = EmbedderConfig(
        kind="openai",
        model="scripted",
        dims=8,
        base_url=server.base_url,
        batch_size=batch_size,
        timeout_s=2,
    )
    return OpenAIEmbedder(config, SecretStr("key"))


def test_an_openai_compatible_endpoint_in_batches(server: FakeLLMServer) -> None:
    vectors = remote(server).embed(["a", "b", "c", "d", "e"])
    assert len(vectors) == 5 and all(len(v) == 8 for v in vectors)
    bodies = [body for path, body in server.requests if path.endswith("/embeddings")]
    assert [b["input"] for b in bodies] == [["a", "b"], ["c", "d"], ["e"]]
    assert {b["model"] for b in bodies} == {"scripted"}


def test_a_failing_endpoint_is_transient_and_not_retried_here(server: FakeLLMServer) -> None:
    server.script_embeddings(Fail(503, "overloaded"))
    with pytest.raises(TransientError, match="503"):
        remote(server).embed(["a"])
    assert len([p for p, _ in server.requests if p.endswith("/embeddings")]) == 1


def test_vectors_of_the_wrong_size_are_a_configuration_mistake(server: FakeLLMServer) -> None:
    config = EmbedderConfig(kind="openai", model="scripted", dims=16, base_url=server.base_url)
    with pytest.raises(PermanentError, match="MEMQ_EMBEDDER_DIMS"):
        OpenAIEmbedder(config, None).embed(["a"])


def test_texts_of_mixed_lengths_come_back_in_order_with_the_vectors_of_each_alone(
    local: MiniLMEmbedder,
) -> None:
    texts = [
        "hi",
        "Caroline went hiking in the Alps with her sister in May 2021 and loved it. " * 3,
        "file your tax return",
        "a kitten naps on the couch while the rain falls on the old tin roof of the barn",
        "ok",
        "",
    ]
    together = local.embed(texts)
    alone = [local.embed([t])[0] for t in texts]
    assert all(cosine(a, b) > 0.9999 for a, b in zip(together, alone, strict=True))
    assert local.embed([]) == []


def test_runs_group_similar_lengths_in_order_and_within_the_batch_size() -> None:
    lengths = [100, 8, 60, 10, 9, 104, 58, 300, 12]
    runs = length_runs(lengths, most=2)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    assert all(len(run) <= 2 for run in runs)
    for run in runs:
        shortest, longest = min(lengths[i] for i in run), max(lengths[i] for i in run)
        assert longest <= max(shortest * RUN_SLACK, shortest + RUN_SLACK_TOKENS)
    assert [[lengths[i] for i in run] for run in length_runs(lengths, most=64)] == [
        [8, 9, 10, 12],
        [58, 60],
        [100, 104],
        [300],
    ]


def test_a_run_holds_at_most_its_padded_tokens_unless_one_text_alone_is_longer() -> None:
    lengths = [20] * 60 + [21, 22, 700]
    runs = length_runs(lengths, most=64, tokens=100)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    assert [len(run) for run in runs] == [5] * 12 + [2, 1]
    assert all(max(lengths[i] for i in run) * len(run) <= 100 for run in runs[:-1])
    assert [lengths[i] for i in runs[-1]] == [700]
    per_run = RUN_TOKENS // 20
    sizes = [len(run) for run in length_runs([20] * 60, most=64)]
    assert sizes == [per_run] * (60 // per_run) + ([60 % per_run] if 60 % per_run else [])
