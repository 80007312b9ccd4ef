"""``memq reprocess --reextract``: the memories made again from the stored conversations, with
the LLM and extraction prompts in use now, into a new index version swapped in behind the
aliases while memq keeps serving (the versions, the write block and the switch are those of
``pipeline.store.reprocess``).

Glossary (besides that module's):
- **replay**: one recorded job run again through the phases, from its record's request,
  with its context as it was (its session's messages stored before it) and a store whose
  memories and entities are the build. It keeps its job id, its times and so its message ids:
  the memories it makes name the same sources. It writes no message, no job record and charges
  no usage; the context and finalize phases are not run. Its memories get a ``REPROCESS``
  history row naming the LLM and the prompts.
- **main pass**: the succeeded jobs that had ended when the build started, in the order they
  were taken in (``created_at``), sessions side by side in batches (one job per session in a
  batch, as the workers run them), paced by ``--rate`` jobs a second.
- **catch-up**: the jobs that ended since, in the order they ended, until a pass finds none;
  then once more under the write block, with what a block catches in flight (below).
- **carried over**: what is not re-extracted is copied as it is: the other tenants' memories
  and entities (``--tenant``), memories whose job has no record (imported) or failed, or whose
  replay failed, and the memories edited by hand (their edit wins over the new extraction).
  Memories deleted by hand are deleted from the build, so a delete stays a delete.
- **checkpoint**: the passes' positions in the build's ``_meta.reprocess``, written after each
  batch, so a run started again with the same settings resumes where it stopped.

Under the write block, a job that had written its memories to the old version but had not
ended (its finalize still to come) is found by the job ids of the old version's memories, and
replayed from its record. A job that meets the block before it persists retries and persists
after the switch, into the new version.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from elasticsearch import Elasticsearch
from pydantic import ValidationError

from pipeline.adapters.embedding.versioned import EmbedderSpec
from pipeline.config import ElasticsearchConfig
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import AddRequest, utcnow
from pipeline.domain.state import JobState, Phase
from pipeline.errors import ConflictError, TransientError
from pipeline.features.erase import erasure_subject, user_query
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.phases import PHASES, run_batch
from pipeline.ingestion.prompts import load_prompt
from pipeline.store import reextract as store
from pipeline.store.build_progress import MetaSink, ProgressWriter, Stage
from pipeline.store.client import es_errors
from pipeline.store.elastic import ElasticStore
from pipeline.store.indices import SCHEMA_VERSION, IndexNames, Kind, put_templates, stored_embedder
from pipeline.store.reindex import by_ids, delete_gone, single_index
from pipeline.store.reprocess import (
    KINDS,
    Pace,
    Progress,
    lift_block,
    paused,
    prepare_build,
    write_history,
)

REEXTRACT = "reextract"
PROMPTS = ("extract_user", "extract_agent", "procedural")
PAGE = 32  # jobs replayed between two checkpoints (fewer under --rate), in waves
IN_FLIGHT_WAIT_S = 30.0  # how long the switch waits for jobs that persisted to end
CATCH_UP_PASSES = 5  # passes before the block; the one under the block takes what is left
JOBS = "jobs"  # what a re-extraction's progress counts
SKIPPED = frozenset({Phase.CONTEXT, Phase.FINALIZE})

MakeDeps = Callable[[ElasticStore], Deps]


@dataclass(frozen=True)
class Extraction:
    """What a re-extraction extracts with: the LLM and the newest shipped prompts."""

    model: str
    base_url: str | None
    prompts: tuple[str, ...]

    @classmethod
    def current(cls, model: str, base_url: str | None) -> Extraction:
        return cls(model, base_url, tuple(load_prompt(name).key for name in PROMPTS))

    def describe(self) -> str:
        where = f" at {self.base_url}" if self.base_url else ""
        return f"{REEXTRACT} with {self.model}{where}, prompts {', '.join(self.prompts)}"

    def meta(self) -> dict[str, Any]:
        return {"llm": {"model": self.model, "base_url": self.base_url}, "prompts": self.prompts}


@dataclass(frozen=True)
class Plan:
    """What a re-extraction would cost (``--dry-run``)."""

    jobs: int
    messages: int
    llm_calls: int
    llm_tokens: int
    uncounted: int  # jobs whose record has no token count (made before counts were kept)


@dataclass
class Replayed:
    """What a run did."""

    sources: dict[Kind, str]
    targets: dict[Kind, str]
    jobs: int = 0
    memories: int = 0
    failed: list[str] = field(default_factory=list)
    carried: int = 0
    dropped: bool = False


def plan(client: Elasticsearch, names: IndexNames, tenant: str | None) -> Plan:
    """The jobs a re-extraction would replay, their messages, and the LLM calls and tokens
    their records say their extraction took."""
    jobs = calls = tokens = uncounted = 0
    store.refresh_jobs(client, names)
    for record, _ in store.jobs_to_replay(client, names, tenant, by="created_at", after=None):
        jobs += 1
        counts = record.counts
        request = request_of(record)
        if "llm_calls" not in counts and request.infer:
            uncounted += 1
        calls += counts.get("llm_calls", 0)
        tokens += counts.get("prompt_tokens", 0) + counts.get("completion_tokens", 0)
    _, messages = store.count_jobs(client, names, tenant)
    return Plan(jobs, messages, calls, tokens, uncounted)


def build_names(
    names: IndexNames, sources: dict[Kind, str], extraction: Extraction, tenant: str | None
) -> dict[Kind, str]:
    """The build of each kind: named by the source and the settings, so a stopped run finds
    it again and a later re-extraction with other settings makes another."""
    key = json.dumps(
        {"source": sources[Kind.MEMORIES], "tenant": tenant, **extraction.meta()}, sort_keys=True
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return {kind: f"{names.alias(kind)}-v{SCHEMA_VERSION}-x{digest}" for kind in KINDS}


def reextract(
    client: Elasticsearch,
    config: ElasticsearchConfig,
    make_deps: MakeDeps,
    extraction: Extraction,
    default_embedder: EmbedderSpec,
    *,
    tenant: str | None = None,
    rate_per_s: float | None = None,
    progress: Progress = lambda _: None,
    drop_old: bool = False,
) -> Replayed:
    """Build (or resume) the re-extracted version and switch to it (see the module doc)."""
    names = IndexNames(config.index_prefix)
    pace = Pace(rate_per_s)
    sources = {kind: single_index(client, names.alias(kind)) for kind in KINDS}
    meta = stored_embedder(client, sources[Kind.MEMORIES])
    spec = EmbedderSpec.model_validate(meta) if meta else default_embedder
    targets = check_reextract(client, names, extraction, tenant)
    reprocess = {"mode": REEXTRACT, "tenant": tenant, "started_at": utcnow().isoformat()}
    for kind in KINDS:
        prepare_build(
            client,
            sources[kind],
            targets[kind],
            kind,
            spec,
            reprocess=reprocess | extraction.meta(),
        )
    lift_block(client, ",".join(sources.values()))  # a run killed in its switch left it
    build = store.build_meta(client, targets[Kind.MEMORIES]).get("reprocess", {})
    started = datetime.fromisoformat(build["started_at"])
    built = ElasticStore(
        client,
        store.BuildNames(
            config.index_prefix,
            memories_index=targets[Kind.MEMORIES],
            entities_index=targets[Kind.ENTITIES],
        ),
    )
    run = Replayer(
        client,
        names,
        make_deps(built),
        Replayed(sources, targets),
        extraction=extraction,
        tenant=tenant,
        checkpoint=dict(build.get("checkpoint", {})),
        pace=pace,
        progress=progress,
        report=ProgressWriter(MetaSink(client, list(targets.values())), REEXTRACT),
    )
    try:
        rebuild(client, names, run, started)
    except BaseException as exc:
        run.report.failed(exc)
        raise
    put_templates(client, config, spec.dims, spec.meta())
    if drop_old:
        with es_errors("drop the old versions"):
            client.indices.delete(index=",".join(sources.values()))
        run.done.dropped = True
    return run.done


def rebuild(client: Elasticsearch, names: IndexNames, run: Replayer, started: datetime) -> None:
    """Copy the other tenants, replay, catch up, switch; the progress told of each step."""
    done, others = run.done, store.others_query(run.tenant)
    if others is not None:
        for kind in KINDS:
            copied = store.copy_matching(
                client, kind, done.sources[kind], done.targets[kind], others
            )
            run.progress(
                f"{kind.value}: {copied} of other tenants copied into {done.targets[kind]}"
            )
    run.report.stage(Stage.SYNC, JOBS, done.jobs, run.total)
    run.main(started)
    run.report.stage(Stage.CATCH_UP, JOBS, done.jobs, run.total)
    for _ in range(CATCH_UP_PASSES):
        if run.catch_up(started) == 0:
            break
    switch(client, names, run, others, started)
    run.report.stage(Stage.SWITCHED, JOBS, done.jobs, max(run.total, done.jobs))


def check_reextract(
    client: Elasticsearch, names: IndexNames, extraction: Extraction, tenant: str | None
) -> dict[Kind, str]:
    """The builds a re-extraction would fill; ``ConflictError`` when the version in use was
    made by one with the same settings."""
    sources = {kind: single_index(client, names.alias(kind)) for kind in KINDS}
    made = store.build_meta(client, sources[Kind.MEMORIES]).get("reprocess", {})
    if made.get("mode") == REEXTRACT and same_settings(made, extraction, tenant):
        raise ConflictError(
            f"the memories in use were already re-extracted with these settings "
            f"({extraction.describe()}, {'tenant ' + tenant if tenant else 'every tenant'})"
        )
    return build_names(names, sources, extraction, tenant)


def same_settings(made: dict[str, Any], extraction: Extraction, tenant: str | None) -> bool:
    """Whether a version's ``_meta.reprocess`` says it was re-extracted as asked now."""
    asked = json.loads(json.dumps(extraction.meta()))  # as stored: lists, not tuples
    return made.get("tenant") == tenant and all(made.get(k) == v for k, v in asked.items())


class Replayer:
    """Replays jobs into the build, keeping the checkpoint."""

    def __init__(
        self,
        client: Elasticsearch,
        names: IndexNames,
        deps: Deps,
        done: Replayed,
        *,
        extraction: Extraction,
        tenant: str | None,
        checkpoint: dict[str, Any],
        pace: Pace,
        progress: Progress,
        report: ProgressWriter,
    ) -> None:
        self.client = client
        self.report = report
        self.total = store.count_jobs(client, names, tenant)[0]
        self.names = names
        self.deps = deps
        self.done = done
        self.extraction = extraction
        self.tenant = tenant
        self.checkpoint = checkpoint
        self.pace = pace
        self.progress = progress
        self.done.failed = list(checkpoint.get("failed", []))
        self.replayed: set[str] = set()  # by this process

    def main(self, started: datetime) -> int:
        """Replay the jobs that had ended when the build started."""
        return self.run_pass("main", by="created_at", before=started)

    def catch_up(self, started: datetime) -> int:
        """Replay the jobs that ended since the build started and were not replayed yet."""
        return self.run_pass("catch_up", by="finished_at", since=started)

    def run_pass(
        self,
        step: str,
        *,
        by: str,
        before: datetime | None = None,
        since: datetime | None = None,
    ) -> int:
        """One pass over the jobs from the checkpoint of ``step`` on (records and messages
        refreshed first, so it sees every one written before it)."""
        store.refresh_jobs(self.client, self.names)
        records = store.jobs_to_replay(
            self.client,
            self.names,
            self.tenant,
            by=by,
            after=self.checkpoint.get(step),
            before=before,
            since=since,
        )
        return self.replay_all(records, step)

    def replay_all(self, records: Iterable[tuple[JobRecord, list[Any]]], step: str) -> int:
        replayed = 0
        for page in pages_of(records, min(PAGE, self.pace.page_size())):
            for wave in waves([record for record, _ in page]):
                self.replay(wave)
            self.checkpoint[step] = page[-1][1]
            self.save()
            replayed += len(page)
            self.pace.after(len(page))
            self.report.advance(JOBS, self.done.jobs, max(self.total, self.done.jobs))
            self.progress(
                f"{step.replace('_', '-')}: {self.done.jobs} jobs replayed, "
                f"{self.done.memories} memories in {self.done.targets[Kind.MEMORIES]}"
            )
        return replayed

    def replay(self, records: list[JobRecord]) -> None:
        """One batch of jobs (of distinct sessions) through the phases into the build."""
        limit = self.deps.limits.context_messages
        states = [state for state in map(self.state_of, records) if state is not None]
        states = [
            state.with_(
                context=store.messages_before(
                    self.client,
                    self.names,
                    state.request.scope,
                    at=state.request.timestamp or state.received_at,
                    job_id=state.job_id,
                    limit=limit,
                )
            ).completed(Phase.CONTEXT, 0.0)
            for state in states
        ]
        for spec in PHASES:
            if spec.phase in SKIPPED:
                continue
            result = run_batch(spec, states, self.deps)
            for job_id, exc in result.failures.items():
                if isinstance(exc, TransientError):
                    raise exc
                self.done.failed.append(job_id)
                reason = getattr(exc, "reason", str(exc))
                self.progress(
                    f"job {job_id} could not be replayed, its memories carry over: {reason}"
                )
            states = [s for s in result.states if s.job_id not in result.failures]
        self.note(states)
        self.done.jobs += len(records)
        self.replayed.update(record.job_id for record in records)

    def state_of(self, record: JobRecord) -> JobState | None:
        """The job as it was taken in; None (noted as failed: its memories carry over) when
        its recorded request is not one this release accepts."""
        try:
            request = request_of(record)
        except ValidationError as exc:
            self.done.failed.append(record.job_id)
            self.progress(f"job {record.job_id} not replayed, its memories carry over: {exc}")
            return None
        return JobState(
            job_id=record.job_id,
            request=request,
            received_at=record.created_at,
            backfill=record.backfill,
        )

    def note(self, states: list[JobState]) -> None:
        """A ``REPROCESS`` history row on each memory the replays stored."""
        hits = [
            {"_id": memory.id, "_source": {"text": memory.text, **state.request.scope.fields()}}
            for state in states
            for memory in state.stored
        ]
        if hits:
            write_history(
                self.client, self.done.targets[Kind.MEMORIES], hits, self.extraction.describe()
            )
        self.done.memories += len(hits)

    def save(self) -> None:
        store.save_checkpoint(
            self.client,
            self.done.targets[Kind.MEMORIES],
            {**self.checkpoint, "failed": self.done.failed},
        )


def request_of(record: JobRecord) -> AddRequest:
    """The request a job was given, without its webhook (a replay notifies no one)."""
    return AddRequest.model_validate({**record.request, "webhook_url": None})


def pages_of(
    records: Iterable[tuple[JobRecord, list[Any]]], size: int = PAGE
) -> Iterator[list[tuple[JobRecord, list[Any]]]]:
    """Consecutive records, ``size`` at a time: the checkpoint moves a page at a time."""
    page: list[tuple[JobRecord, list[Any]]] = []
    for item in records:
        page.append(item)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page


def waves(records: list[JobRecord]) -> list[list[JobRecord]]:
    """``records`` as batches run one after the other: the n-th wave holds the n-th job of each
    session, so a session's jobs run in their order and different sessions side by side."""
    found: list[list[JobRecord]] = []
    taken: dict[str | None, int] = {}
    for record in records:
        n = taken.get(record.session_key, 0)
        taken[record.session_key] = n + 1
        if n == len(found):
            found.append([])
        found[n].append(record)
    return found


def switch(
    client: Elasticsearch,
    names: IndexNames,
    run: Replayer,
    others: dict[str, Any] | None,
    started: datetime,
) -> None:
    """Pause writes to the sources, replay and carry over what is left, move both aliases."""
    done = run.done
    sources = ",".join(done.sources.values())
    with paused(client, sources):
        run.progress(f"writes to {sources} paused for the catch-up")
        with es_errors("refresh before the catch-up"):
            client.indices.refresh(index=f"{sources},{','.join(done.targets.values())}")
        run.catch_up(started)
        in_flight(client, names, run)
        carry_over(client, run)
        forget_erased(client, names, run, started)
        if others is not None:
            for kind in KINDS:
                store.copy_matching(client, kind, done.sources[kind], done.targets[kind], others)
                delete_gone(client, done.sources[kind], done.targets[kind], others)
        actions: list[dict[str, Any]] = []
        for kind in KINDS:
            alias = names.alias(kind)
            actions += [
                {"remove": {"index": done.sources[kind], "alias": alias}},
                {"add": {"index": done.targets[kind], "alias": alias, "is_write_index": True}},
            ]
        with es_errors("move the aliases"):
            client.indices.refresh(index=",".join(done.targets.values()))
            client.indices.update_aliases(actions=actions)
    run.progress(f"now {', '.join(done.targets.values())}: {run.extraction.describe()}")


def in_flight(client: Elasticsearch, names: IndexNames, run: Replayer) -> None:
    """The jobs that wrote memories to the source that the build lacks, and this run did not
    replay: those that had not ended when the writes were paused (their finalize still to
    come) are waited for a while, and those, with any that ended unseen by the catch-up, are
    replayed from their records (a job still running after the wait too: its finalize comes
    after the switch). Those with no record (imported) or that failed are noted: their
    memories carry over."""
    done = run.done
    source, target = done.sources[Kind.MEMORIES], done.targets[Kind.MEMORIES]
    written = store.memory_jobs(client, source, run.tenant)
    missing = sorted(written - store.memory_jobs(client, target, run.tenant))
    if not missing:
        return
    deadline = time.monotonic() + IN_FLIGHT_WAIT_S
    shared = ElasticStore(client, names)
    records = recorded(shared, missing)
    while any(not r.ended for r in records.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        records = recorded(shared, missing)
    store.refresh_jobs(client, names)
    todo = sorted(
        (
            r
            for r in records.values()
            if not r.ended or (r.status is JobStatus.SUCCEEDED and r.job_id not in run.replayed)
        ),
        key=lambda r: (r.created_at, r.job_id),
    )
    for wave in waves(todo):
        run.replay(wave)
    unrecorded = [job_id for job_id in missing if job_id not in records]
    failed = [r.job_id for r in records.values() if r.ended and r.status is not JobStatus.SUCCEEDED]
    done.failed += unrecorded + failed
    run.save()


def forget_erased(
    client: Elasticsearch, names: IndexNames, run: Replayer, started: datetime
) -> None:
    """Users erased since the build started may have been replayed into it before their
    records went: their memories and entities leave the build, and the history rows the
    replays wrote for them leave the history, as the erasure did for the rest."""
    erased = store.erased_since(client, names, started)
    if not erased:
        return
    target = run.done.targets[Kind.MEMORIES]
    indices = [*run.done.targets.values(), names.history]
    shared = ElasticStore(client, names)
    for tenant, user_id in sorted(store.users_in(client, target, run.tenant)):
        if erasure_subject(tenant, user_id) in erased:
            query = user_query(tenant, user_id)
            deleted = sum(shared.delete_matching(index, query) for index in indices)
            run.progress(f"an erased user's {deleted} documents left the build")


def recorded(shared: ElasticStore, job_ids: list[str]) -> dict[str, JobRecord]:
    """The records of those of ``job_ids`` that have one."""
    return {job_id: r for job_id, r in shared.get_jobs(job_ids).items() if r is not None}


def carry_over(client: Elasticsearch, run: Replayer) -> None:
    """Copy what is not re-extracted: memories of jobs that could not be replayed, and hand
    edits; delete from the build what was deleted by hand."""
    done = run.done
    source, target = done.sources[Kind.MEMORIES], done.targets[Kind.MEMORIES]
    if done.failed:
        where = [*store.tenant_filter(run.tenant), {"terms": {"job_id": sorted(set(done.failed))}}]
        done.carried += store.copy_matching(
            client, Kind.MEMORIES, source, target, {"bool": {"filter": where}}
        )
    hand = store.hand_changes(client, run.names, run.tenant)
    done.carried += store.overwrite_with(client, Kind.MEMORIES, source, target, sorted(hand.edited))
    present = (
        {h["_id"] for h in by_ids(client, source, sorted(hand.deleted))} if hand.deleted else set()
    )
    store.delete_ids(client, target, sorted(hand.deleted - present))
    run.progress(f"memories: {done.carried} carried over as they were")
