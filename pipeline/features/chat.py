"""Chat-platform webhooks: signature checks and the parsing of each platform's payload into
``ChatEvent``s. Pure functions; the API verifies and parses, the workers debounce and submit.

- Slack Events API: ``X-Slack-Signature: v0=hex(HMAC-SHA256(secret, "v0:{ts}:{body}"))`` with
  ``X-Slack-Request-Timestamp`` within the tolerance; ``url_verification`` answered with its
  challenge; retries recognised by ``event_id``.
- Telegram Bot API: ``X-Telegram-Bot-Api-Secret-Token`` equal to the configured secret; retries
  recognised by ``update_id``.
- Generic: ``X-Memq-Signature: sha256=hex(HMAC-SHA256(secret, "{ts}.{body}"))`` with
  ``X-Memq-Timestamp``; the body names its own ``event_id`` and conversation.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline.errors import InvalidInputError


class SignatureError(InvalidInputError):
    """The request is not signed by the platform (or is too old): answer 401."""


@dataclass(frozen=True)
class ChatEvent:
    """One chat message, placed in its conversation (``conversation`` groups a debounce burst)."""

    platform: str
    event_id: str
    conversation: str
    user_id: str
    run_id: str | None
    role: str
    name: str | None
    content: str
    at: datetime


def _hmac_hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_SIGNATURE = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable ASCII: what a hex signature is made of


def check_timestamp(raw: str | None, now: datetime, tolerance_s: int) -> None:
    """Unix seconds in ASCII digits, within ``tolerance_s`` of ``now``. Anything else (other
    scripts' digits, signs, a number too large for a float) is a ``SignatureError``."""
    if raw is None or not _TIMESTAMP.match(raw):
        raise SignatureError("missing or malformed request timestamp")
    if abs(now.timestamp() - int(raw)) > tolerance_s:
        raise SignatureError(
            "request timestamp outside the allowed window (replayed or clock skew)"
        )


@dataclass(frozen=True)
class HmacScheme:
    """How a platform signs: ``prefix + hex(HMAC-SHA256(secret, template(ts) + body))``."""

    name: str
    prefix: str
    template: str  # what precedes the body in the signed message; {ts} is the timestamp


SLACK = HmacScheme("Slack", "v0=", "v0:{ts}:")
GENERIC = HmacScheme("webhook", "sha256=", "{ts}.")


@dataclass(frozen=True)
class SignedBody:
    """A request body with the timestamp and signature headers that came with it."""

    body: bytes
    timestamp: str | None
    signature: str | None


def verify_hmac(
    scheme: HmacScheme, secret: str, signed: SignedBody, *, now: datetime, tolerance_s: int
) -> None:
    """Raise ``SignatureError`` unless ``signed`` is fresh and signed with ``secret``."""
    check_timestamp(signed.timestamp, now, tolerance_s)
    expected = sign(scheme, secret, signed.timestamp or "", signed.body)
    if not _printable(signed.signature) or not hmac.compare_digest(
        expected.encode(), (signed.signature or "").encode()
    ):
        raise SignatureError(f"bad {scheme.name} signature")


def sign(scheme: HmacScheme, secret: str, timestamp: str, body: bytes) -> str:
    """The signature header value ``scheme`` gives ``body`` sent at ``timestamp``."""
    message = scheme.template.format(ts=timestamp).encode() + body
    return scheme.prefix + _hmac_hex(secret, message)


def _printable(value: str | None) -> bool:
    """A header value worth comparing: ``hmac.compare_digest`` raises on non-ASCII text."""
    return value is not None and _SIGNATURE.match(value) is not None


def verify_telegram(secret: str, token: str | None) -> None:
    if not _printable(token) or not hmac.compare_digest(secret.encode(), (token or "").encode()):
        raise SignatureError("bad Telegram secret token")


def load_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise InvalidInputError("the body is not JSON") from exc
    if not isinstance(data, dict):
        raise InvalidInputError("the body must be a JSON object")
    return data


def event_time(seconds: object) -> datetime:
    """A platform's Unix time as a datetime; ``InvalidInputError`` for anything else."""
    try:
        return datetime.fromtimestamp(float(str(seconds)), UTC)
    except (ValueError, OverflowError, OSError) as exc:
        raise InvalidInputError(f"the message time {str(seconds)[:40]!r} is not a time") from exc


def slack_event(payload: dict[str, Any]) -> ChatEvent | None:
    """The message of an ``event_callback``, or None for events memq does not keep (edits,
    joins, bot messages, other event types)."""
    event = payload.get("event")
    if not isinstance(event, dict) or event.get("type") != "message":
        return None
    if event.get("subtype") or event.get("bot_id") or not str(event.get("text", "")).strip():
        return None
    channel, ts = str(event.get("channel", "")), str(event.get("ts", "0"))
    thread = event.get("thread_ts")
    team = str(payload.get("team_id", "slack"))
    return ChatEvent(
        platform="slack",
        event_id=str(payload.get("event_id") or f"{channel}:{ts}"),
        conversation=f"slack:{team}:{channel}:{thread or ''}",
        user_id=f"slack:{team}:{channel}",
        run_id=f"thread:{thread}" if thread else None,
        role="user",
        name=str(event.get("user") or "") or None,
        content=str(event["text"]),
        at=event_time(ts),
    )


def telegram_event(update: dict[str, Any]) -> ChatEvent | None:
    message = update.get("message") or update.get("channel_post")
    if not isinstance(message, dict) or not str(message.get("text", "")).strip():
        return None
    chat = message.get("chat") or {}
    sender = message.get("from") or {}
    chat_id = str(chat.get("id", ""))
    name = sender.get("username") or sender.get("first_name")
    return ChatEvent(
        platform="telegram",
        event_id=str(update.get("update_id")),
        conversation=f"telegram:{chat_id}",
        user_id=f"telegram:{chat_id}",
        run_id=None,
        role="assistant" if sender.get("is_bot") else "user",
        name=str(name) if name else None,
        content=str(message["text"]),
        at=event_time(message.get("date", 0)),
    )


def generic_event(payload: dict[str, Any], now: datetime) -> ChatEvent:
    missing = [
        k for k in ("event_id", "conversation_id", "user_id", "content") if not payload.get(k)
    ]
    if missing:
        raise InvalidInputError(f"missing {', '.join(missing)}", field=missing[0])
    role = str(payload.get("role", "user"))
    if role not in ("user", "assistant"):
        raise InvalidInputError("role must be user or assistant", field="role")
    return ChatEvent(
        platform="generic",
        event_id=str(payload["event_id"]),
        conversation=f"generic:{payload['conversation_id']}",
        user_id=str(payload["user_id"]),
        run_id=str(payload["run_id"]) if payload.get("run_id") else None,
        role=role,
        name=str(payload["name"]) if payload.get("name") else None,
        content=str(payload["content"]),
        at=now,
    )
