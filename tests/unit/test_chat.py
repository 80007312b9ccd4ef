"""Parsing and signature checks of chat-platform payloads."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import pytest

from pipeline.errors import InvalidInputError
from pipeline.features.chat import (
    SLACK,
    SignatureError,
    SignedBody,
    generic_event,
    slack_event,
    telegram_event,
    verify_hmac,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def signed(body: bytes, ts: str, secret: str = "s") -> str:
    return (
        "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    )


def test_slack_signature_checks_secret_body_and_age() -> None:
    ts = str(int(NOW.timestamp()))
    verify_hmac(SLACK, "s", SignedBody(b"{}", ts, signed(b"{}", ts)), now=NOW, tolerance_s=300)
    with pytest.raises(SignatureError, match="bad Slack signature"):
        tampered = SignedBody(b'{"x":1}', ts, signed(b"{}", ts))
        verify_hmac(SLACK, "s", tampered, now=NOW, tolerance_s=300)
    with pytest.raises(SignatureError, match="window"):
        old = str(int(NOW.timestamp()) - 301)
        verify_hmac(
            SLACK, "s", SignedBody(b"{}", old, signed(b"{}", old)), now=NOW, tolerance_s=300
        )
    with pytest.raises(SignatureError):
        verify_hmac(SLACK, "s", SignedBody(b"{}", "not-a-time", "v0=00"), now=NOW, tolerance_s=300)


def message(**event: object) -> dict[str, object]:
    base = {
        "type": "message",
        "user": "U1",
        "text": "hi",
        "channel": "C1",
        "ts": "1700000000.000100",
    }
    return {"event_id": "Ev1", "team_id": "T1", "event": {**base, **event}}


def test_slack_keeps_user_messages_and_groups_threads() -> None:
    event = slack_event(message(thread_ts="1699999999.000001"))
    assert event is not None
    assert (event.user_id, event.run_id, event.name) == (
        "slack:T1:C1",
        "thread:1699999999.000001",
        "U1",
    )
    assert event.conversation == "slack:T1:C1:1699999999.000001"
    assert slack_event(message(subtype="channel_join")) is None
    assert slack_event(message(bot_id="B1")) is None
    assert slack_event(message(text="   ")) is None
    assert slack_event({"event": {"type": "reaction_added"}}) is None


def test_telegram_messages_and_bots() -> None:
    update = {
        "update_id": 5,
        "message": {
            "date": 1700000000,
            "text": "hey",
            "chat": {"id": 42},
            "from": {"id": 1, "is_bot": True, "first_name": "Helper"},
        },
    }
    event = telegram_event(update)
    assert event is not None and event.role == "assistant" and event.name == "Helper"
    assert event.user_id == "telegram:42" and event.event_id == "5"
    assert telegram_event({"update_id": 6, "edited_message": {}}) is None


def test_generic_events_name_what_is_missing() -> None:
    with pytest.raises(InvalidInputError) as caught:
        generic_event({"event_id": "e", "user_id": "u", "content": "c"}, NOW)
    assert caught.value.field == "conversation_id"
    with pytest.raises(InvalidInputError):
        generic_event(
            {
                "event_id": "e",
                "conversation_id": "c",
                "user_id": "u",
                "content": "x",
                "role": "system",
            },
            NOW,
        )
