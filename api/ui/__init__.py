"""The web explorer at ``/ui``: server-rendered pages (Jinja2) over the same services and
tenant checks as the API, with our own stylesheet and a vendored htmx (``static/``) for the
one live part, a batch's progress. Nothing is fetched from elsewhere: it works offline."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.ui import admin, auth, jobs, memories
from api.ui.core import HERE
from api.ui.session import session_secret


def mount_ui(app: FastAPI) -> None:
    """Serve the explorer's pages and files under ``/ui`` (see ``api.ui.session`` for the
    secret its sessions are signed with)."""
    app.state.ui_secret = session_secret(app.state.settings.api.admin_key)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui_static")
    for router in (auth.router, memories.router, jobs.router, admin.router):
        app.include_router(router)
