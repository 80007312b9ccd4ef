"""Request dependencies: the per-process runtime, and the caller authenticated by API key."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

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


def get_keys(request: Request) -> KeyStore:
    keys: KeyStore = request.app.state.keys
    return keys


def get_principal(request: Request) -> Principal:
    """``Authorization: Bearer <key>`` (or ``Token <key>``, as mem0 clients send)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() not in ("bearer", "token") or not token.strip():
        raise UnauthorizedError("missing API key: send 'Authorization: Bearer <key>'")
    runtime = get_runtime(request)
    principal = get_keys(request).authenticate(token.strip(), runtime.settings.api.admin_key)
    if principal is None:
        raise UnauthorizedError("unknown or revoked API key")
    return principal


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
