"""``create_app(settings)``: the FastAPI application."""

from __future__ import annotations

from fastapi import FastAPI

from pipeline.config import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the API for ``settings`` (read from the environment when omitted)."""
    settings = settings or Settings()
    app = FastAPI(title="memq", version="0.1.0", description="Long-term memory for AI agents.")
    app.state.settings = settings

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """The process is up and serving."""
        return {"status": "ok"}

    return app
