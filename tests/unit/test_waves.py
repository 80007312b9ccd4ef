"""When the jobs of a batch whose LLM calls have returned go on without the stragglers."""

from __future__ import annotations

from workers.waves import hold_s, wave_due


def test_a_job_waits_at_least_the_wave_time_and_half_its_own_call() -> None:
    assert hold_s(0.02, 500) == 0.5  # an instant call waits the wave time
    assert hold_s(3.0, 500) == 1.5  # a slow provider's call waits in proportion


def test_done_jobs_go_on_once_the_remaining_calls_have_gone_quiet() -> None:
    # held until 10.5; the last call ended at 10.2
    assert not wave_due(10.4, 10.5, 10.2, 500)  # not held long enough yet
    assert not wave_due(10.6, 10.5, 10.2, 500)  # a call ended 0.4 s ago: others may follow
    assert wave_due(10.7, 10.5, 10.2, 500)  # quiet for 0.5 s: the rest are stragglers


def test_calls_ending_one_after_another_never_split_the_batch() -> None:
    """An instant model on a busy machine: a call ends every 30 ms for a second."""
    ends = [10.0 + 0.03 * i for i in range(34)]
    first_due = ends[0] + hold_s(0.03, 500)
    assert not any(wave_due(end + 0.01, first_due, end, 500) for end in ends)
