"""When a gather waits for its batch to fill: only while the arrival rate brings another job
within the wait."""

from __future__ import annotations

import pytest

from workers.scheduler.batches import arrivals_due


@pytest.mark.parametrize(
    ("per_second", "wait_ms", "due"),
    [
        (1, 20, False),  # a lone job
        (8, 20, False),  # a client sending one conversation after another, ~120 ms each
        (49, 20, False),  # one every 20.4 ms: most likely none within 20 ms
        (50, 20, True),  # one every 20 ms
        (200, 20, True),  # a burst, or a batch's end handing on to many sessions
        (1, 2000, False),  # a long wait, but a single job seen: nothing says more will come
        (2, 2000, True),
        (10, 50, False),
        (20, 50, True),
    ],
)
def test_a_gather_lingers_only_when_another_job_is_due_within_the_wait(
    per_second: int, wait_ms: int, due: bool
) -> None:
    assert arrivals_due(per_second, wait_ms) is due
