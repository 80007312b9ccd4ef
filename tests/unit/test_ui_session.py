"""The explorer's session cookie and CSRF tokens (``api.ui.session``), and the explorer's
paging cursor (``pipeline.features.explorer``)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from api.ui.session import (
    SESSION_S,
    csrf_ok,
    csrf_token,
    decode_session,
    encode_session,
    new_session,
    session_secret,
)
from pipeline.errors import InvalidInputError
from pipeline.features.explorer import decode_after, encode_after
from pipeline.serving.keys import Principal

SECRET = session_secret(SecretStr("an-admin-key-of-at-least-24-chars"))
ALICE = Principal(key_id="0123456789abcdef", tenant="acme")


def test_a_session_round_trips_and_names_the_key_not_its_secret() -> None:
    session = new_session(ALICE, now=1000.0)
    cookie = encode_session(SECRET, session)
    assert decode_session(SECRET, cookie, now=1001.0) == session
    assert session.principal == ALICE
    assert "mq_" not in cookie


def test_a_tampered_forged_or_expired_session_is_refused() -> None:
    cookie = encode_session(SECRET, new_session(ALICE, now=1000.0))
    payload, _, mac = cookie.partition(".")
    other = encode_session(SECRET, new_session(Principal("fedcba9876543210", "evil"), now=1000.0))
    assert decode_session(SECRET, f"{other.partition('.')[0]}.{mac}", now=1001.0) is None
    assert decode_session(SECRET, f"{payload}.", now=1001.0) is None
    assert decode_session(SECRET, "garbage", now=1001.0) is None
    assert decode_session(session_secret(None), cookie, now=1001.0) is None  # another secret
    assert decode_session(SECRET, cookie, now=1000.0 + SESSION_S + 1) is None


def test_the_secret_follows_the_admin_key_and_is_random_without_one() -> None:
    assert session_secret(SecretStr("an-admin-key-of-at-least-24-chars")) == SECRET
    assert session_secret(None) != session_secret(None)


def test_csrf_tokens_belong_to_one_session() -> None:
    first, second = new_session(ALICE), new_session(ALICE)
    token = csrf_token(SECRET, first.nonce)
    assert csrf_ok(SECRET, first.nonce, token)
    assert not csrf_ok(SECRET, second.nonce, token)
    assert not csrf_ok(SECRET, first.nonce, "")


def test_a_browse_cursor_round_trips_and_a_made_up_one_is_refused() -> None:
    sort = [1796316196966, 3, "591c902b15442c936af1c12ac0252860"]
    assert decode_after(encode_after(sort)) == sort
    for bad in ("not base64!", encode_after([1, 2]), "e30="):
        with pytest.raises(InvalidInputError):
            decode_after(bad)
