"""``ElasticStore`` composes its repositories with ``Forward``: each protocol method is its
repository's, under the same name."""

from __future__ import annotations

import inspect

import pytest

from pipeline.store.elastic import ElasticStore
from pipeline.store.protocol import KeyRecords, ServingStore
from pipeline.store.repositories.base import Forward
from pipeline.store.repositories.jobs import JobRepository


def protocol_methods(protocol: type) -> set[str]:
    return {
        name
        for klass in protocol.__mro__
        if klass not in (object,) and getattr(klass, "_is_protocol", False)
        for name, value in vars(klass).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }


@pytest.mark.parametrize("protocol", [ServingStore, KeyRecords])
def test_every_protocol_method_is_forwarded_to_a_repository_method_of_its_name(
    protocol: type,
) -> None:
    methods = protocol_methods(protocol)
    assert len(methods) >= 5
    for name in methods:
        forward = inspect.getattr_static(ElasticStore, name)
        assert isinstance(forward, Forward), name
        assert forward.method.__name__ == name
        assert forward.__doc__ == forward.method.__doc__


def test_a_forward_under_another_name_is_refused_when_its_class_is_made() -> None:
    with pytest.raises((TypeError, RuntimeError)) as caught:  # 3.11 wraps it in RuntimeError
        type("Store", (), {"get_jobs": Forward("jobs", JobRepository.get_job)})
    assert "Store.get_jobs forwards to get_job" in f"{caught.value} {caught.value.__cause__}"


def test_a_forward_hands_out_the_repository_bound_method() -> None:
    class Holder:
        jobs = object.__new__(JobRepository)
        get_job = Forward("jobs", JobRepository.get_job)

    holder = Holder()
    assert holder.get_job.__self__ is Holder.jobs  # type: ignore[attr-defined]
