"""Phases over a batch of jobs, and their per-item fallback.

A batch phase takes the states of several jobs (each of its own session) and pays each call
once for all of them: one model call, one msearch, one bulk. When that shared call fails, the
phase is run again for each job alone, so a failure that belongs to one job stays with that job
and its batch-mates go on. ``BatchResult`` says which jobs went on and which failed with what.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipeline.domain.state import JobState
from pipeline.errors import MemqError
from pipeline.ingestion.deps import Deps
from pipeline.logs import log_context

log = logging.getLogger("memq.batch")


@dataclass
class BatchResult:
    """The jobs a phase finished (their new states, in input order) and the ones it could not
    finish, by job id, with the error that stopped each."""

    states: list[JobState] = field(default_factory=list)
    failures: dict[str, MemqError] = field(default_factory=dict)

    def merge(self, other: BatchResult) -> None:
        self.states += other.states
        self.failures.update(other.failures)


BatchRun = Callable[[Sequence[JobState], Deps], BatchResult]
SharedRun = Callable[[Sequence[JobState], Deps], list[JobState]]


def shared(run: SharedRun) -> BatchRun:
    """A phase whose calls are shared by the whole batch: run once for all; if that raises,
    run once per job, so only the jobs that fail alone are reported failed."""

    def batch(states: Sequence[JobState], deps: Deps) -> BatchResult:
        if not states:
            return BatchResult()
        try:
            return BatchResult(states=run(states, deps))
        except MemqError as exc:
            if len(states) == 1:
                return BatchResult(failures={states[0].job_id: exc})
            log.warning("batch of %d failed (%s); running its jobs one by one", len(states), exc)
        result = BatchResult()
        for state in states:
            try:
                with log_context(**state.log_fields()):
                    result.states += run([state], deps)
            except MemqError as exc:
                result.failures[state.job_id] = exc
        return result

    batch.__doc__ = run.__doc__
    return batch


def single(batch: BatchRun) -> Callable[[JobState, Deps], JobState]:
    """The phase for one job: its new state, or the error that stopped it, raised."""

    def run(state: JobState, deps: Deps) -> JobState:
        result = batch([state], deps)
        if state.job_id in result.failures:
            raise result.failures[state.job_id]
        return result.states[0]

    run.__doc__ = batch.__doc__
    return run
