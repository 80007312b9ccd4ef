"""``GET /v1/export``: the caller's own memories as a streamed JSON-lines dump."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from api.deps import ClockDep, ElasticStoreDep, PrincipalDep, SettingsDep
from api.limits import ReadLimited
from pipeline.adapters.embedding.versioned import spec_in_use
from pipeline.domain.models import Identifier
from pipeline.features.export import ExportOptions, Selector, export_lines

router = APIRouter(prefix="/v1", tags=["export"], dependencies=[ReadLimited])


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}}}},
)
def export(
    *,
    store: ElasticStoreDep,
    settings: SettingsDep,
    clock: ClockDep,
    principal: PrincipalDep,
    user_id: Annotated[Identifier | None, Query(max_length=128)] = None,
    agent_id: Annotated[Identifier | None, Query(max_length=128)] = None,
    run_id: Annotated[Identifier | None, Query(max_length=128)] = None,
    history: Annotated[bool, Query(description="include each memory's history")] = False,
    vectors: Annotated[bool, Query(description="include vectors and name their model")] = False,
    sources: Annotated[
        bool, Query(description="include the messages each memory came from (its provenance)")
    ] = False,
) -> StreamingResponse:
    """Every memory of the caller's tenant (narrowed by any ids given) as JSON lines: a header,
    one line per memory, an end line with the count. A dump without its end line was cut
    short. ``memq import`` restores it."""
    selector = Selector(tenant=principal.tenant, user_id=user_id, agent_id=agent_id, run_id=run_id)
    options = ExportOptions(selector=selector, history=history, vectors=vectors, sources=sources)
    embedder = spec_in_use(settings.embedder, store.embedder_meta())
    lines = export_lines(store, options, embedder.model, embedder.dims, clock())
    first = next(lines)  # the header; also reaches the store before the status is sent
    filename = f"memq-{principal.tenant}.jsonl"
    return StreamingResponse(
        chain(first, lines),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest
