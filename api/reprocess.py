"""What ``/v1/admin/reprocess`` and the explorer's admin page share: the status of the index
versions and their builds' progress, and a reprocess started (or planned) from a request."""

from __future__ import annotations

from contextlib import suppress

from api.schemas import (
    EmbedderPublic,
    IndexVersionPublic,
    ReprocessCreate,
    ReprocessPlanPublic,
    ReprocessProgressPublic,
    ReprocessStartedPublic,
    ReprocessStatusPublic,
)
from pipeline.adapters.embedding.versioned import EmbedderSpec
from pipeline.config import Settings
from pipeline.errors import InvalidInputError, TransientError
from pipeline.features.reextract import REEXTRACT
from pipeline.features.reprocess import ReprocessRun, embedder_spec, plan_of, reextract_run, start
from pipeline.ingestion.intake import Intake
from pipeline.store.build_progress import BuildProgress
from pipeline.store.elastic import ElasticStore


def status_public(store: ElasticStore, settings: Settings, intake: Intake) -> ReprocessStatusPublic:
    """The embedder in use, each version with its build's progress, and the active run."""
    default = EmbedderSpec.of(settings.embedder).meta()
    in_use = store.embedder_meta() or default
    run_id: str | None = None
    active: bool | None = None  # Redis away: the versions still show, the lock's state not
    with suppress(TransientError):
        run_id = intake.active_reprocess()
        active = run_id is not None
    return ReprocessStatusPublic(
        embedder=EmbedderPublic.model_validate(in_use),
        versions=[
            IndexVersionPublic(
                kind=kind.value,
                index=version.index,
                state=version.state,  # type: ignore[arg-type]
                documents=version.documents,
                embedder=EmbedderPublic.model_validate(version.embedder or default),
                progress=progress_public(version.progress),
            )
            for kind, versions in store.index_versions().items()
            for version in versions
        ],
        active=active,
        run_id=run_id,
    )


def progress_public(progress: BuildProgress | None) -> ReprocessProgressPublic | None:
    if progress is None:
        return None
    return ReprocessProgressPublic.model_validate(progress.meta())


def run_of(settings: Settings, store: ElasticStore, body: ReprocessCreate) -> ReprocessRun:
    """The run ``body`` asks for; ``InvalidInputError`` names a bad embedder field, or a
    tenant given to a re-embedding."""
    if body.mode == REEXTRACT:
        return reextract_run(
            settings, store.client, tenant=body.tenant, rate_per_s=body.rate, drop_old=body.drop_old
        )
    if body.tenant is not None:
        raise InvalidInputError(
            "tenant goes with mode reextract: a re-embedding is of every tenant", field="tenant"
        )
    choice = body.embedder
    spec = embedder_spec(settings, choice.kind, choice.model, choice.dims, choice.base_url)
    return ReprocessRun(spec, body.rate, body.drop_old)


def plan_public(store: ElasticStore, settings: Settings, run: ReprocessRun) -> ReprocessPlanPublic:
    cost = plan_of(settings, store.client, run)
    return ReprocessPlanPublic(
        embedder=EmbedderPublic.model_validate(run.spec.meta()),
        memories=cost.memories,
        entities=cost.entities,
        embedding_calls=cost.embedding_calls,
        llm_calls=cost.llm_calls,
        llm_tokens=cost.llm_tokens,
        jobs=cost.jobs,
        messages=cost.messages,
        uncounted=cost.uncounted,
    )


def start_public(
    store: ElasticStore, settings: Settings, intake: Intake, run: ReprocessRun, status_url: str
) -> ReprocessStartedPublic:
    """Start ``run`` on a worker (``pipeline.features.reprocess.start``); what was started."""
    run_id, builds = start(settings, store.client, intake, run)
    return ReprocessStartedPublic(
        run_id=run_id,
        embedder=EmbedderPublic.model_validate(run.spec.meta()),
        builds=list(builds.values()),
        status_url=status_url,
    )
