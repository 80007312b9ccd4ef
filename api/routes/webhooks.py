"""Chat-platform webhooks (fire-and-forget): verify the platform's signature, deduplicate its
retries, buffer the message; a burst of one channel/thread becomes one job. These endpoints
authenticate by the platform's signature, not by API key; each is off until its secret is set."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from api.body import refuse_lone_surrogates
from api.deps import ClockDep, IntakeDep
from api.schemas import SlackChallenge, WebhookAck
from pipeline.config import ChatConfig, Settings
from pipeline.errors import NotFoundError
from pipeline.features import chat
from pipeline.ingestion.intake import Intake
from pipeline.services import Clock

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


async def verified(
    request: Request, clock: Clock, scheme: chat.HmacScheme, secret: str, headers: tuple[str, str]
) -> bytes:
    """The body, once its signature headers check out (``SignatureError`` → 401 otherwise)."""
    config = chat_config(request)
    timestamp, signature = headers
    signed = chat.SignedBody(
        await request.body(), request.headers.get(timestamp), request.headers.get(signature)
    )
    chat.verify_hmac(
        scheme,
        secret,
        signed,
        now=clock(),
        tolerance_s=config.signature_tolerance_s,
    )
    return signed.body


async def accept(intake: Intake, event: chat.ChatEvent | None) -> WebhookAck:
    """Buffer a verified event (a text that is not valid Unicode is refused with 422 first,
    as any unusable message is)."""
    if event is None:
        return WebhookAck(accepted=False)
    refuse_lone_surrogates(dataclasses.asdict(event))
    return WebhookAck(accepted=await run_in_threadpool(intake.accept_chat, event))


@router.post("/slack")
async def slack(
    request: Request, intake: IntakeDep, clock: ClockDep
) -> WebhookAck | SlackChallenge:
    """Slack Events API: answers the url_verification handshake; keeps message events."""
    secret = enabled(chat_config(request).slack_signing_secret, "slack")
    body = await verified(
        request, clock, chat.SLACK, secret, ("x-slack-request-timestamp", "x-slack-signature")
    )
    payload = chat.load_json(body)
    if payload.get("type") == "url_verification":
        return SlackChallenge(challenge=str(payload.get("challenge", "")))
    return await accept(intake, chat.slack_event(payload))


@router.post("/telegram")
async def telegram(request: Request, intake: IntakeDep) -> WebhookAck:
    """Telegram Bot API updates (the bot's webhook secret_token is
    MEMQ_CHAT_TELEGRAM_SECRET_TOKEN)."""
    secret = enabled(chat_config(request).telegram_secret_token, "telegram")
    chat.verify_telegram(secret, request.headers.get("x-telegram-bot-api-secret-token"))
    return await accept(intake, chat.telegram_event(chat.load_json(await request.body())))


@router.post("/generic")
async def generic(request: Request, intake: IntakeDep, clock: ClockDep) -> WebhookAck:
    """Any other source: HMAC-SHA256 of "{X-Memq-Timestamp}.{body}" in X-Memq-Signature."""
    secret = enabled(chat_config(request).webhook_secret, "generic")
    body = await verified(
        request, clock, chat.GENERIC, secret, ("x-memq-timestamp", "x-memq-signature")
    )
    return await accept(intake, chat.generic_event(chat.load_json(body), clock()))
