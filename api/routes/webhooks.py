"""Chat-platform webhooks (fire-and-forget): verify the platform's signature, deduplicate its
retries, buffer the message; a burst of one channel/thread becomes one job. These endpoints
authenticate by the platform's signature, not by API key; each is off until its secret is set."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from api.deps import CeleryDep
from pipeline import chat
from pipeline.config import ChatConfig, Settings
from pipeline.errors import NotFoundError
from workers.chat import accept_event

router = APIRouter(prefix="/v1/webhooks", tags=["chat platforms"])


def chat_config(request: Request) -> ChatConfig:
    """The API's own settings (they hold the platform secrets; workers need none)."""
    settings: Settings = request.app.state.settings
    return settings.chat


def enabled(secret: Any, platform: str) -> str:
    if secret is None:
        raise NotFoundError(f"{platform} webhooks are not enabled on this server")
    value: str = secret.get_secret_value()
    return value


@router.post("/slack")
async def slack(request: Request, app: CeleryDep) -> dict[str, Any]:
    """Slack Events API: answers the url_verification handshake; keeps message events."""
    config = chat_config(request)
    secret = enabled(config.slack_signing_secret, "slack")
    body = await request.body()
    chat.verify_slack(
        secret,
        request.headers.get("x-slack-request-timestamp"),
        request.headers.get("x-slack-signature"),
        body,
        now=app.runtime.clock(),
        tolerance_s=config.signature_tolerance_s,
    )
    payload = chat.load_json(body)
    if payload.get("type") == "url_verification":
        return {"challenge": payload.get("challenge", "")}
    event = chat.slack_event(payload)
    return {
        "ok": True,
        "accepted": event is not None and await run_in_threadpool(accept_event, app, event),
    }


@router.post("/telegram")
async def telegram(request: Request, app: CeleryDep) -> dict[str, Any]:
    """Telegram Bot API updates (the bot's webhook secret_token is
    MEMQ_CHAT_TELEGRAM_SECRET_TOKEN)."""
    secret = enabled(chat_config(request).telegram_secret_token, "telegram")
    chat.verify_telegram(secret, request.headers.get("x-telegram-bot-api-secret-token"))
    event = chat.telegram_event(chat.load_json(await request.body()))
    return {
        "ok": True,
        "accepted": event is not None and await run_in_threadpool(accept_event, app, event),
    }


@router.post("/generic")
async def generic(request: Request, app: CeleryDep) -> dict[str, Any]:
    """Any other source: HMAC-SHA256 of "{X-Memq-Timestamp}.{body}" in X-Memq-Signature."""
    config = chat_config(request)
    secret = enabled(config.webhook_secret, "generic")
    body = await request.body()
    chat.verify_generic(
        secret,
        request.headers.get("x-memq-timestamp"),
        request.headers.get("x-memq-signature"),
        body,
        now=app.runtime.clock(),
        tolerance_s=config.signature_tolerance_s,
    )
    event = chat.generic_event(chat.load_json(body), app.runtime.clock())
    return {"ok": True, "accepted": await run_in_threadpool(accept_event, app, event)}
