"""What every explorer page shares: templates, the signed-in session as a dependency, CSRF
checks on forms, and ``PageRoute``, which answers memq's errors with an HTML page (a missing
or ended session with a redirect to sign in) instead of the API's JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Form, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError

from api.deps import ForbiddenError, ResourcesDep
from api.errors import _status, location, log_unexpected, most_specific
from api.resources import Resources
from api.ui.session import COOKIE, Session, csrf_ok, csrf_token, decode_session
from pipeline.errors import MemqError

HERE = Path(__file__).parent
TEMPLATES = Jinja2Templates(directory=HERE / "templates")


def when(value: object) -> str:
    """A time as a page shows it: ``2025-05-01 14:03:07 UTC`` (a blank for none)."""
    if value is None or value == "":
        return "—"
    moment = value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if isinstance(moment, datetime):
        return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


def as_json(value: object) -> str:
    """JSON text for a form field (escaped by the template like any text, unlike ``tojson``,
    whose output is marked safe and would end an attribute at its first quote)."""
    return json.dumps(value, ensure_ascii=False)


TEMPLATES.env.filters["when"] = when
TEMPLATES.env.filters["json"] = as_json
# No script but our own files, no frames, nothing cached: pages show one tenant's data.
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class SignInNeededError(Exception):
    """No session, or one that ended: the page answers with a redirect to sign in."""


def secret_of(request: Request) -> bytes:
    secret: bytes = request.app.state.ui_secret
    return secret


def current_session(request: Request, resources: ResourcesDep) -> Session:
    """The browser's session; ``SignInNeededError`` when it has none that is still valid."""
    raw = request.cookies.get(COOKIE)
    session = decode_session(secret_of(request), raw) if raw else None
    if session is None or not key_still_valid(resources, session):
        raise SignInNeededError
    request.state.ui_session = session
    return session


def key_still_valid(resources: Resources, session: Session) -> bool:
    if session.key_id == "admin":  # the bootstrap key lives in Settings, not in the store
        return resources.settings.api.admin_key is not None
    principal = resources.services.keys.principal(session.key_id)
    return principal is not None and principal.tenant == session.tenant


SessionDep = Annotated[Session, Depends(current_session)]


def admin_session(session: SessionDep) -> Session:
    if not session.admin:
        raise ForbiddenError("this page needs an admin key")
    return session


def posted_session(
    request: Request, session: SessionDep, csrf: Annotated[str, Form(max_length=100)] = ""
) -> Session:
    """The session of a form post whose CSRF token is the session's."""
    if not csrf_ok(secret_of(request), session.nonce, csrf):
        raise ForbiddenError("the form is stale or not from this site: reload the page")
    return session


AdminSessionDep = Annotated[Session, Depends(admin_session)]
PostedSessionDep = Annotated[Session, Depends(posted_session)]


def admin_posted_session(session: PostedSessionDep) -> Session:
    return admin_session(session)


AdminPostedSessionDep = Annotated[Session, Depends(admin_posted_session)]


def render(
    request: Request, template: str, context: dict[str, Any], status_code: int = 200
) -> Response:
    """``template`` with ``context``, plus the session and its CSRF token for the layout."""
    session: Session | None = getattr(request.state, "ui_session", None)
    shared = {
        "session": session,
        "csrf": csrf_token(secret_of(request), session.nonce) if session else "",
    }
    return TEMPLATES.TemplateResponse(
        request, template, {**shared, **context}, status_code=status_code
    )


def see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def error_page(request: Request, exc: Exception) -> Response:
    if isinstance(exc, SignInNeededError):
        return see_other(str(request.url_for("ui_login_page")))
    if isinstance(exc, RequestValidationError | ValidationError):
        chosen = most_specific(exc.errors())
        where = location(tuple(chosen.get("loc", ())))
        message = f"{where or 'input'}: {chosen.get('msg', 'invalid')}"
        return render(request, "error.html", {"status": 422, "message": message}, 422)
    assert isinstance(exc, MemqError)
    status, _ = _status(exc)
    if status == 500:
        log_unexpected(request)
    return render(request, "error.html", {"status": status, "message": exc.reason}, status)


class PageRoute(APIRoute):
    """A route of the explorer: memq's errors become pages, and every answer carries
    ``HEADERS``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            try:
                response = await handler(request)
            except (SignInNeededError, MemqError, RequestValidationError, ValidationError) as exc:
                response = error_page(request, exc)
            response.headers.update(HEADERS)
            return response

        return page
