"""The V3 ingestion phases, in order, each over a batch of jobs.

``PHASES`` is the one list both drivers walk: the Celery chain (one task per phase, on the
phase's queue, each task given a batch of jobs) and the in-process ``run_job`` used by the
``Memory`` facade and unit tests (a batch of one). ``PhaseSpec.run`` is a phase for one job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from time import perf_counter

from pipeline.domain.state import JobState, Phase
from pipeline.ingestion.batch import BatchResult, BatchRun, single
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases.context import collect_context_batch
from pipeline.ingestion.phases.dedup import dedup_facts_batch
from pipeline.ingestion.phases.embed import embed_facts_batch
from pipeline.ingestion.phases.extract import Outcome, extract_each, extract_facts_batch
from pipeline.ingestion.phases.finalize import finalize_jobs_batch
from pipeline.ingestion.phases.lemmatize import lemmatize_facts_batch
from pipeline.ingestion.phases.link import link_entities_batch
from pipeline.ingestion.phases.persist import persist_memories_batch
from pipeline.ingestion.phases.retrieve import retrieve_existing_batch


class Workload(StrEnum):
    """Which queue a phase belongs on: I/O-bound (LLM, Elasticsearch) or CPU-bound (models)."""

    IO = "io"
    CPU = "cpu"


# A phase's jobs one by one as each ends (see ``extract_each``): a driver may hand the ones
# that are done on while the rest still run.
EachRun = Callable[[Sequence[JobState], Deps, float | None], Iterator[Outcome | None]]


@dataclass(frozen=True)
class PhaseSpec:
    phase: Phase
    batch: BatchRun
    workload: Workload
    each: EachRun | None = None  # set for a phase whose jobs wait on calls of uneven length

    @property
    def run(self) -> Callable[[JobState, Deps], JobState]:
        """The phase for one job (raises what stopped it)."""
        return single(self.batch)


PHASES: tuple[PhaseSpec, ...] = (
    PhaseSpec(Phase.CONTEXT, collect_context_batch, Workload.IO),
    PhaseSpec(Phase.RETRIEVE, retrieve_existing_batch, Workload.CPU),
    PhaseSpec(Phase.EXTRACT, extract_facts_batch, Workload.IO, extract_each),
    PhaseSpec(Phase.EMBED, embed_facts_batch, Workload.CPU),
    PhaseSpec(Phase.LEMMATIZE, lemmatize_facts_batch, Workload.CPU),
    PhaseSpec(Phase.DEDUP, dedup_facts_batch, Workload.IO),
    PhaseSpec(Phase.LINK, link_entities_batch, Workload.CPU),
    PhaseSpec(Phase.PERSIST, persist_memories_batch, Workload.IO),
    PhaseSpec(Phase.FINALIZE, finalize_jobs_batch, Workload.IO),
)


def next_phase(phase: Phase) -> Phase | None:
    """The phase after ``phase`` (None after the last)."""
    phases = [spec.phase for spec in PHASES]
    index = phases.index(phase) + 1
    return phases[index] if index < len(phases) else None


def run_batch(spec: PhaseSpec, states: Sequence[JobState], deps: Deps) -> BatchResult:
    """Run one phase over the jobs of a batch that have not done it yet (a job that has is
    passed through: a redelivered task is a no-op for it); record each job's duration."""
    todo = [s for s in states if not s.is_done(spec.phase)]
    result = BatchResult(states=[s for s in states if s.is_done(spec.phase)])
    if not todo:
        return result
    started = perf_counter()
    ran = spec.batch(todo, deps)
    elapsed = (perf_counter() - started) * 1000
    result.states += [s.completed(spec.phase, elapsed) for s in ran.states]
    result.failures.update(ran.failures)
    return result


def run_phase(spec: PhaseSpec, state: JobState, deps: Deps) -> JobState:
    """Run one phase for one job unless its state says it is done; raises what stopped it."""
    result = run_batch(spec, [state], deps)
    if state.job_id in result.failures:
        raise result.failures[state.job_id]
    return result.states[0]


def run_job(state: JobState, deps: Deps) -> JobState:
    """Every phase in order, in this process (the facade's driver)."""
    for spec in PHASES:
        state = run_phase(spec, state, deps)
    return state
