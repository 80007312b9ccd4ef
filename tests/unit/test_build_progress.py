"""The progress writer of a reprocess (``pipeline.store.build_progress``): a write at each
stage change, at most one every ``every_s`` between, the failure's reason kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pipeline.errors import TransientError
from pipeline.store.build_progress import BuildProgress, ProgressWriter, Stage


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=self.t)


def writer(written: list[BuildProgress], clock: Clock) -> ProgressWriter:
    return ProgressWriter(written.append, "reembed", every_s=2.0, clock=clock.monotonic,
                          now=clock.now)  # fmt: skip


def test_pages_are_written_at_most_every_two_seconds_and_each_kind_change_at_once() -> None:
    written: list[BuildProgress] = []
    clock = Clock()
    report = writer(written, clock)
    for done in range(1, 11):  # ten pages, 0.5 s apart
        report.advance("memories", done * 10, 100)
        clock.t += 0.5
    assert [p.done for p in written] == [10, 50, 90]
    report.advance("entities", 5, 20)  # another kind: at once
    assert (written[-1].kind, written[-1].done) == ("entities", 5)
    report.stage(Stage.CATCH_UP, "memories")
    report.stage(Stage.SWITCHED)
    assert [p.stage for p in written[-2:]] == [Stage.CATCH_UP, Stage.SWITCHED]
    assert written[-1].updated_at == clock.now().isoformat()
    assert {p.started_at for p in written} == {datetime(2026, 1, 1, tzinfo=UTC).isoformat()}


def test_a_failure_is_written_with_its_reason_and_a_failing_sink_stops_nothing() -> None:
    written: list[BuildProgress] = []
    clock = Clock()
    report = writer(written, clock)
    report.advance("memories", 30, 100)
    clock.t += 0.1
    report.advance("memories", 40, 100)  # kept, not written
    report.failed(TransientError("Elasticsearch unreachable"))
    last = written[-1]
    assert (last.stage, last.done, last.reason) == (Stage.FAILED, 40, "Elasticsearch unreachable")
    assert BuildProgress.from_meta(last.meta()) == last

    def broken(_: BuildProgress) -> None:
        raise TransientError("the mapping cannot be written")

    ProgressWriter(broken, "reembed").stage(Stage.SYNC, "memories")  # logged, not raised


def test_a_progress_of_another_shape_reads_as_none() -> None:
    assert BuildProgress.from_meta(None) is None
    assert BuildProgress.from_meta({"stage": "dancing"}) is None
