"""Request dependencies: the per-process runtime, and the caller authenticated by API key."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, FastAPI, Path, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from pipeline.errors import PermanentError
from pipeline.keys import KeyStore, Principal
from workers.app import MemqCelery
from workers.runtime import Runtime


class UnauthorizedError(PermanentError):
    """No valid key: 401."""


class ForbiddenError(PermanentError):
    """A valid key without the right to this: 403."""


def get_app(request: Request) -> MemqCelery:
    app: MemqCelery = request.app.state.celery
    return app


def get_runtime(request: Request) -> Runtime:
    return get_app(request).runtime


def keys_of(app: FastAPI) -> KeyStore:
    """The app's key store, built on first use: the app itself is built without touching
    Elasticsearch (``memq openapi`` runs offline; a node that is down at start is a 503 later,
    not a process that cannot start)."""
    keys: KeyStore | None = getattr(app.state, "keys", None)
    if keys is None:
        runtime: Runtime = app.state.celery.runtime
        cache_s = runtime.settings.api.key_cache_s
        keys = app.state.keys = KeyStore(runtime.es, runtime.store.names, cache_s)
    return keys


def get_keys(request: Request) -> KeyStore:
    return keys_of(request.app)


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
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
    header: Annotated[str | None, Security(TOKEN)],
) -> Principal:
    """``Authorization: Bearer <key>`` (or ``Token <key>``, as mem0 clients send)."""
    token = bearer.credentials.strip() if bearer is not None else token_of(header or "")
    if not token:
        raise UnauthorizedError("missing API key: send 'Authorization: Bearer <key>'")
    runtime = get_runtime(request)
    principal = get_keys(request).authenticate(token, runtime.settings.api.admin_key)
    if principal is None:
        raise UnauthorizedError("unknown or revoked API key")
    return principal


def token_of(header: str) -> str:
    """The key of a ``Token <key>`` header; empty for any other scheme."""
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "token" else ""


def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    if not principal.admin:
        raise ForbiddenError("this needs an admin key")
    return principal


CeleryDep = Annotated[MemqCelery, Depends(get_app)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
KeysDep = Annotated[KeyStore, Depends(get_keys)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(get_admin)]

IdPath = Annotated[
    str, Path(pattern=r"^\S{1,128}$", description="an id: 1-128 characters, no spaces")
]
