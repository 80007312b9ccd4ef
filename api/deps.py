"""Request dependencies, typed: the API's resources (built in ``create_app`` from Settings,
kept in ``app.state.resources``), and the caller authenticated by API key.

A handler names what it needs (``StoreDep``, ``SearcherDep``, ``IntakeDep``, …) and never
the bundle: a test can swap any one of them with ``app.dependency_overrides``.

A dependency that only reads what is already built is ``async def``: FastAPI calls it on the
event loop, where a plain function would cost a hop to a worker thread and back. One that may
build its resource on first use (a store that checks its indices, a searcher that loads its
model, the Celery intake) or that waits on a server stays a plain function, run in a thread,
so that the event loop never blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Path, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from api.resources import Resources
from api.search_slots import FairSearcher
from pipeline.config import Settings
from pipeline.domain.models import Identifier
from pipeline.errors import PermanentError
from pipeline.features.usage import UsageLedger
from pipeline.ingestion.deps import Deps
from pipeline.ingestion.intake import Intake
from pipeline.serving.keys import KeyStore, Principal
from pipeline.store.elastic import ElasticStore
from pipeline.store.protocol import ServingStore


class UnauthorizedError(PermanentError):
    """No valid key: 401."""


class ForbiddenError(PermanentError):
    """A valid key without the right to this: 403."""


async def get_resources(request: Request) -> Resources:
    resources: Resources = request.app.state.resources
    return resources


ResourcesDep = Annotated[Resources, Depends(get_resources)]


async def get_settings(resources: ResourcesDep) -> Settings:
    return resources.settings


def get_store(resources: ResourcesDep) -> ServingStore:
    """The store (its indices are made or checked by the first request that needs it)."""
    return resources.services.store


def get_elastic_store(resources: ResourcesDep) -> ElasticStore:
    """The Elasticsearch store itself, for what only it does: export's dumps and reset."""
    return resources.services.store


def get_searcher(resources: ResourcesDep) -> FairSearcher:
    return resources.searcher


def get_keys(resources: ResourcesDep) -> KeyStore:
    return resources.services.keys


def get_phase_deps(resources: ResourcesDep) -> Deps:
    """The phases' dependencies (an update re-embeds its new text with the same embedder)."""
    return resources.services.deps


async def get_clock(resources: ResourcesDep) -> Callable[[], datetime]:
    return resources.services.clock


def get_intake(resources: ResourcesDep) -> Intake:
    return resources.intake


async def get_usage(resources: ResourcesDep) -> UsageLedger:
    return resources.usage


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[ServingStore, Depends(get_store)]
ElasticStoreDep = Annotated[ElasticStore, Depends(get_elastic_store)]
SearcherDep = Annotated[FairSearcher, Depends(get_searcher)]
KeysDep = Annotated[KeyStore, Depends(get_keys)]
PhaseDepsDep = Annotated[Deps, Depends(get_phase_deps)]
ClockDep = Annotated[Callable[[], datetime], Depends(get_clock)]
IntakeDep = Annotated[Intake, Depends(get_intake)]
UsageDep = Annotated[UsageLedger, Depends(get_usage)]

# Both schemes are declared so that OpenAPI documents them (Swagger's Authorize button); they
# read the same header, and either one is enough (neither raises on its own).
BEARER = HTTPBearer(
    scheme_name="bearer",
    description="An API key: `Authorization: Bearer mq_…`",
    auto_error=False,
)
TOKEN = APIKeyHeader(
    name="Authorization",
    scheme_name="token",
    description="The same key as mem0 clients send it: `Authorization: Token mq_…`",
    auto_error=False,
)


def get_principal(
    resources: ResourcesDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
    header: Annotated[str | None, Security(TOKEN)],
) -> Principal:
    """``Authorization: Bearer <key>`` (or ``Token <key>``, as mem0 clients send)."""
    token = bearer.credentials.strip() if bearer is not None else token_of(header or "")
    if not token:
        raise UnauthorizedError("missing API key: send 'Authorization: Bearer <key>'")
    # the key store is reached only for a request that sends a key (it needs the node)
    keys = resources.services.keys
    principal = keys.authenticate(token, resources.settings.api.admin_key)
    if principal is None:
        raise UnauthorizedError("unknown or revoked API key")
    return principal


def token_of(header: str) -> str:
    """The key of a ``Token <key>`` header; empty for any other scheme."""
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "token" else ""


async def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if not principal.admin:
        raise ForbiddenError("this needs an admin key")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(get_admin)]

IdPath = Annotated[
    Identifier,
    Path(description="an id: 1-128 characters, no spaces, no control or format characters"),
]
