"""When the jobs of a batch whose LLM calls have returned go on without the stragglers."""

from __future__ import annotations

from workers.scheduler.waves import wave_due


def test_done_jobs_wait_for_their_batch_mates_only_the_wave_time() -> None:
    # the first held job's call returned at 10.0
    assert not wave_due(10.0, 10.0, 500)
    assert not wave_due(10.49, 10.0, 500)  # calls ending meanwhile join it
    assert wave_due(10.5, 10.0, 500)  # then it goes on, whatever is still out


def test_calls_that_keep_ending_do_not_hold_a_done_job_longer() -> None:
    """A hosted-like model: a call of the batch ends every 200 ms for three seconds. The job
    whose call ended first goes on after the wave time, not when the calls go quiet."""
    ends = [10.0 + 0.2 * i for i in range(16)]
    due = [end for end in ends if wave_due(end, ends[0], 500)]
    assert due[0] == ends[3]  # 10.6: the first end at or past 10.5
