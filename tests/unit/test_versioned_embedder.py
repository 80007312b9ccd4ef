"""The embedder follows the index version: the spec the index names, read again after the
interval or when told (a store call met another vector size); the settings' embedder while the
index names none or cannot be read; each spec's models made once."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pipeline.adapters.embedding.versioned import (
    EmbedderSpec,
    IndexEmbedder,
    Models,
    refresh_embedder,
)
from pipeline.config import EmbedderConfig
from pipeline.errors import EmbedderChangedError, TransientError
from pipeline.ingestion.phases.revector import again
from pipeline.serving.fusion import cosines
from pipeline.store.reprocess import Pace

OLD = EmbedderSpec(kind="openai", model="old", dims=4)
NEW = EmbedderSpec(kind="openai", model="new", dims=8, base_url="http://new")


class Sized:
    """Vectors of ``dims`` ones; counts its calls."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [[1.0] * self.dims for _ in texts]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def following(
    named: list[EmbedderSpec | Exception | None],
) -> tuple[IndexEmbedder, Clock, list[EmbedderSpec]]:
    made: list[EmbedderSpec] = []

    def read() -> EmbedderSpec | None:
        found = named[0]
        if isinstance(found, Exception):
            raise found
        return found

    def make(spec: EmbedderSpec) -> Models:
        made.append(spec)
        model = Sized(spec.dims)
        return Models(model, model)

    clock = Clock()
    return IndexEmbedder(OLD, read, make, interval_s=2.0, clock=clock), clock, made


def test_the_index_spec_is_followed_after_the_interval_or_a_refresh() -> None:
    named: list[EmbedderSpec | Exception | None] = [None]
    embedder, clock, made = following(named)
    assert embedder.dims == 4  # none named: the settings'
    named[0] = NEW
    clock.now = 1.0
    assert embedder.dims == 4  # read again only after the interval
    clock.now = 2.5
    assert len(embedder.embed(["a"])[0]) == 8
    assert embedder.names.dims == 8
    named[0] = OLD
    refresh_embedder(embedder)  # a store call met the other size: read at once
    assert embedder.dims == 4
    named[0] = NEW
    clock.now = 5.0
    assert embedder.spec == NEW
    assert made == [OLD, NEW]  # each spec's models made once


def test_an_unreadable_index_keeps_the_spec_known() -> None:
    named: list[EmbedderSpec | Exception | None] = [NEW]
    embedder, clock, _ = following(named)
    assert embedder.dims == 8
    named[0] = TransientError("Elasticsearch unreachable")
    clock.now = 10.0
    assert embedder.dims == 8


def test_a_spec_round_trips_through_an_index_meta_and_names_its_version() -> None:
    assert EmbedderSpec.from_meta({"embedder": NEW.meta()}) == NEW
    assert EmbedderSpec.from_meta({"dims": 4}) is None
    assert NEW.digest != OLD.digest and len(NEW.digest) == 8
    base = EmbedderConfig(batch_size=7)
    assert NEW.config(base).model_dump(include={"model", "dims", "batch_size"}) == {
        "model": "new", "dims": 8, "batch_size": 7,
    }  # fmt: skip


def test_vectors_of_the_old_size_are_embedded_again_and_others_kept() -> None:
    model = Sized(8)
    current: list[list[float] | None] = [[0.5] * 8, None]
    assert again(model, ["a", "b"], current) is current and model.calls == 0
    stale: list[list[float] | None] = [[0.5] * 4, None]
    assert again(model, ["a", "b"], stale) == [[1.0] * 8, None]


def test_cosines_across_a_switch_of_embedder_say_so() -> None:
    with pytest.raises(EmbedderChangedError):
        cosines([1.0, 0.0], [[1.0, 0.0, 0.0]])


def test_pace_keeps_to_its_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    slept: list[float] = []
    monkeypatch.setattr("pipeline.store.reprocess.time.sleep", slept.append)
    pace = Pace(50, clock=clock)
    assert pace.page_size() == 50
    pace.after(50)
    assert slept == [1.0]
    with pytest.raises(Exception, match="rate"):
        Pace(0)
