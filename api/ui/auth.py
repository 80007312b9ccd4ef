"""Signing in with a tenant key, and out."""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from api.deps import ResourcesDep
from api.ui.core import PageRoute, PostedSessionDep, render, secret_of, see_other
from api.ui.session import (
    COOKIE,
    LOGIN_COOKIE,
    PATH,
    csrf_token,
    encode_session,
    new_session,
)

router = APIRouter(prefix="/ui", route_class=PageRoute, include_in_schema=False)


def login_form(request: Request, message: str | None = None, status_code: int = 200) -> Response:
    """The sign-in form, with a fresh double-submit token (cookie and hidden field)."""
    nonce = secrets.token_hex(16)
    response = render(
        request,
        "login.html",
        {"login_csrf": csrf_token(secret_of(request), nonce), "message": message},
        status_code,
    )
    response.set_cookie(LOGIN_COOKIE, nonce, path=PATH, httponly=True, samesite="strict")
    return response


@router.get("/login", name="ui_login_page")
def login_page(request: Request) -> Response:
    return login_form(request)


@router.post("/login")
def login(
    request: Request,
    resources: ResourcesDep,
    key: Annotated[str, Form(max_length=500)] = "",
    csrf: Annotated[str, Form(max_length=100)] = "",
) -> Response:
    """Check the key as the API would; on success set the session cookie (see
    ``api.ui.session``) and go to the scopes. The key itself is never stored or shown."""
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or not hmac.compare_digest(csrf, csrf_token(secret_of(request), nonce)):
        return login_form(request, "The form was stale: sign in again.", 403)
    principal = resources.services.keys.authenticate(key.strip(), resources.settings.api.admin_key)
    if principal is None:
        return login_form(request, "Unknown or revoked key.", 401)
    target = "ui_admin_page" if principal.admin else "ui_scopes_page"
    response = see_other(str(request.url_for(target)))
    cookie = encode_session(secret_of(request), new_session(principal))
    secure = request.url.scheme == "https"
    # no max_age/expires: a session cookie, gone when the browser's session ends
    response.set_cookie(COOKIE, cookie, path=PATH, httponly=True, samesite="strict", secure=secure)
    response.delete_cookie(LOGIN_COOKIE, path=PATH)
    return response


@router.post("/logout")
def logout(request: Request, _session: PostedSessionDep) -> Response:
    response = see_other(str(request.url_for("ui_login_page")))
    response.delete_cookie(COOKIE, path=PATH)
    return response


@router.get("", name="ui_home")
def home(request: Request) -> Response:
    return see_other(str(request.url_for("ui_scopes_page")))
