"""The V3 ingestion phases, in order: plain functions ``(JobState, Deps) -> JobState``.

``PHASES`` is the one list both drivers walk: the Celery chain (one task per phase, on the
phase's queue) and the in-process ``run_job`` used by the ``Memory`` facade and unit tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from time import perf_counter

from pipeline.deps import Deps
from pipeline.phases.context import collect_context
from pipeline.phases.dedup import dedup_facts
from pipeline.phases.embed import embed_facts
from pipeline.phases.extract import extract_facts
from pipeline.phases.finalize import finalize_job
from pipeline.phases.lemmatize import lemmatize_facts
from pipeline.phases.link import link_entities
from pipeline.phases.persist import persist_memories
from pipeline.phases.retrieve import retrieve_existing
from pipeline.state import JobState, Phase


class Workload(StrEnum):
    """Which queue a phase belongs on: I/O-bound (LLM, Elasticsearch) or CPU-bound (models)."""

    IO = "io"
    CPU = "cpu"


@dataclass(frozen=True)
class PhaseSpec:
    phase: Phase
    run: Callable[[JobState, Deps], JobState]
    workload: Workload


PHASES: tuple[PhaseSpec, ...] = (
    PhaseSpec(Phase.CONTEXT, collect_context, Workload.IO),
    PhaseSpec(Phase.RETRIEVE, retrieve_existing, Workload.CPU),
    PhaseSpec(Phase.EXTRACT, extract_facts, Workload.IO),
    PhaseSpec(Phase.EMBED, embed_facts, Workload.CPU),
    PhaseSpec(Phase.LEMMATIZE, lemmatize_facts, Workload.CPU),
    PhaseSpec(Phase.DEDUP, dedup_facts, Workload.IO),
    PhaseSpec(Phase.PERSIST, persist_memories, Workload.IO),
    PhaseSpec(Phase.LINK, link_entities, Workload.CPU),
    PhaseSpec(Phase.FINALIZE, finalize_job, Workload.IO),
)


def run_phase(spec: PhaseSpec, state: JobState, deps: Deps) -> JobState:
    """Run one phase unless the state says it is done; record its duration."""
    if state.is_done(spec.phase):
        return state
    started = perf_counter()
    result = spec.run(state, deps)
    return result.completed(spec.phase, (perf_counter() - started) * 1000)


def run_job(state: JobState, deps: Deps) -> JobState:
    """Every phase in order, in this process (the facade's driver)."""
    for spec in PHASES:
        state = run_phase(spec, state, deps)
    return state
