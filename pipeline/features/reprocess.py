"""A reprocess as every surface asks for it (``memq reprocess``, ``POST /v1/admin/reprocess``,
the explorer's admin page, the worker task): the embedder asked for, checked once, the plan
of a dry run, and the run itself over ``pipeline.store.reprocess``. Nothing here knows who
runs it or how it is queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from elasticsearch import Elasticsearch

from pipeline.adapters.embedding.versioned import EmbedderSpec, settings_models
from pipeline.config import Settings
from pipeline.domain.models import utcnow
from pipeline.errors import InvalidInputError
from pipeline.features.reextract import REEXTRACT, Extraction, Replayed, check_reextract, reextract
from pipeline.features.reextract import plan as plan_reextraction
from pipeline.store.client import make_client
from pipeline.store.indices import IndexNames, Kind, stored_embedder
from pipeline.store.reprocess import REEMBED, Plan, Progress, Reembedded, check_new, plan, reembed

if TYPE_CHECKING:  # pipeline.ingestion.intake names ReprocessRun
    from pipeline.ingestion.intake import Intake

EMBEDDER_KINDS = ("local", "openai")
MIN_DIMS, MAX_DIMS = 8, 4096


def embedder_spec(
    settings: Settings,
    kind: str | None = None,
    model: str | None = None,
    dims: int | None = None,
    base_url: str | None = None,
    *,
    label: str = "embedder.",
) -> EmbedderSpec:
    """The embedder asked for: the fields given, the rest from ``MEMQ_EMBEDDER_*``.
    ``InvalidInputError`` names a bad field as ``label`` + its name (``--embedder-`` for
    the command line)."""
    base = EmbedderSpec.of(settings.embedder)
    kind = kind or base.kind
    if kind not in EMBEDDER_KINDS:
        raise InvalidInputError(f"{label}kind must be local or openai", field="embedder_kind")
    dims = dims or base.dims
    if not MIN_DIMS <= dims <= MAX_DIMS:
        raise InvalidInputError(
            f"{label}dims must be {MIN_DIMS}..{MAX_DIMS}", field="embedder_dims"
        )
    return EmbedderSpec(
        kind=kind, model=model or base.model, dims=dims, base_url=base_url or base.base_url
    )


@dataclass(frozen=True)
class ReprocessRun:
    """One run asked for: its mode, the embedder (``reembed``: the new one; ``reextract``:
    the one in use, kept), at most ``rate_per_s`` documents (``reembed``) or jobs
    (``reextract``) a second (None: as fast as it goes), whether the replaced version is
    deleted after the swap, and (``reextract``) the one tenant re-extracted (None: all).
    Travels as ``message()`` (plain JSON) to the worker that runs it."""

    spec: EmbedderSpec
    rate_per_s: float | None = None
    drop_old: bool = False
    mode: str = REEMBED
    tenant: str | None = None

    def message(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "embedder": self.spec.meta(),
            "rate_per_s": self.rate_per_s,
            "drop_old": self.drop_old,
            "tenant": self.tenant,
        }

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> ReprocessRun:
        spec = EmbedderSpec.from_meta(message)
        mode = message.get("mode")
        if spec is None or mode not in {REEMBED, REEXTRACT}:
            raise InvalidInputError(f"not a reprocess this release runs: {message!r}")
        return cls(
            spec,
            message.get("rate_per_s"),
            bool(message.get("drop_old")),
            str(mode),
            message.get("tenant"),
        )


def reextract_run(
    settings: Settings,
    client: Elasticsearch,
    *,
    tenant: str | None,
    rate_per_s: float | None = None,
    drop_old: bool = False,
) -> ReprocessRun:
    """A re-extraction of ``tenant`` (None: every tenant), keeping the embedder in use."""
    meta = stored_embedder(client, IndexNames(settings.es.index_prefix).memories)
    spec = EmbedderSpec.model_validate(meta) if meta else EmbedderSpec.of(settings.embedder)
    return ReprocessRun(spec, rate_per_s, drop_old, REEXTRACT, tenant)


def extraction_of(settings: Settings) -> Extraction:
    """What a re-extraction extracts with: the LLM of ``MEMQ_LLM_*`` and the shipped prompts;
    ``InvalidInputError`` when no LLM is configured."""
    if not settings.llm_configured():
        raise InvalidInputError(
            "re-extraction needs an LLM: set MEMQ_LLM_BASE_URL or OPENAI_API_KEY"
        )
    return Extraction.current(settings.llm.model, settings.llm.base_url)


def start(
    settings: Settings, client: Elasticsearch, intake: Intake, run: ReprocessRun
) -> tuple[str, dict[Kind, str]]:
    """Hand ``run`` to the workers (``Intake.start_reprocess``): its run id and the builds it
    fills. Refused before anything is sent: ``InvalidInputError`` for a rate of 0 or less,
    ``ConflictError`` when the version in use is of its embedder already or a run is active."""
    if run.rate_per_s is not None and run.rate_per_s <= 0:
        raise InvalidInputError("rate must be above 0 a second", field="rate")
    names, default = IndexNames(settings.es.index_prefix), EmbedderSpec.of(settings.embedder)
    if run.mode == REEXTRACT:
        builds = check_reextract(client, names, extraction_of(settings), run.tenant)
    else:
        builds = check_new(client, names, run.spec, default)
    return intake.start_reprocess(run), builds


def plan_of(settings: Settings, client: Elasticsearch, run: ReprocessRun) -> Plan:
    """What ``run`` would cost (a dry run): the texts to embed, the embedding calls; for a
    re-extraction, the jobs and messages to replay and the LLM calls and tokens they took."""
    if run.mode == REEXTRACT:
        cost = plan_reextraction(client, IndexNames(settings.es.index_prefix), run.tenant)
        return Plan(
            memories=0,
            entities=0,
            embedding_calls=0,
            llm_calls=cost.llm_calls,
            llm_tokens=cost.llm_tokens,
            jobs=cost.jobs,
            messages=cost.messages,
            uncounted=cost.uncounted,
        )
    batch_size = run.spec.config(settings.embedder).batch_size
    return plan(client, IndexNames(settings.es.index_prefix), batch_size)


def run_reprocess(
    settings: Settings, run: ReprocessRun, progress: Progress = lambda _: None
) -> Reembedded | Replayed:
    """Build (or resume) ``run``'s version and switch to it (``pipeline.store.reprocess``,
    ``pipeline.features.reextract``); its progress is recorded in the builds as it goes."""
    if run.mode == REEXTRACT:
        from pipeline.services import build_deps  # the models are loaded for a run only

        return reextract(
            make_client(settings.es),
            settings.es,
            lambda store: build_deps(settings, store, utcnow),
            extraction_of(settings),
            run.spec,
            tenant=run.tenant,
            rate_per_s=run.rate_per_s,
            progress=progress,
            drop_old=run.drop_old,
        )
    client, default = make_client(settings.es), EmbedderSpec.of(settings.embedder)
    check_new(client, IndexNames(settings.es.index_prefix), run.spec, default)
    embedder = settings_models(settings)(run.spec).embedder
    return reembed(
        client,
        settings.es,
        run.spec,
        embedder,
        rate_per_s=run.rate_per_s,
        progress=progress,
        drop_old=run.drop_old,
    )
