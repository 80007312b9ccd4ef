"""The explorer's sign-in session: a signed cookie that names a key, never holds it.

Signing in posts a tenant key once; the server checks it like any API call and answers with
``memq_ui``, an ``HttpOnly``, ``SameSite=Strict`` session cookie (no ``Max-Age``: the browser
drops it when its session ends) holding ``{key id, tenant, admin, expiry, nonce}`` and an
HMAC-SHA256 of them. Every request checks the signature, the expiry (``SESSION_S``) and that
the key is still valid (a revoked key ends its sessions within the key cache's ``cache_s``).

The signing secret is derived from the admin key when the server has one (every API process
of a deployment then accepts the same sessions; changing the admin key ends them all), else
made at random when the process starts (sessions end when it restarts).

Forms that change something carry a CSRF token: an HMAC of the session's nonce, checked on
every POST (``SameSite=Strict`` already keeps other sites' requests cookie-less; the token is
the second lock). The sign-in form, which has no session yet, uses a double-submit cookie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from pydantic import SecretStr

from pipeline.serving.keys import Principal

COOKIE = "memq_ui"
LOGIN_COOKIE = "memq_ui_login"
SESSION_S = 8 * 3600
PATH = "/ui"


def session_secret(admin_key: SecretStr | None) -> bytes:
    """The key sessions are signed with (see the module's docstring)."""
    if admin_key is None:
        return secrets.token_bytes(32)
    return hashlib.sha256(b"memq-ui-session\x1f" + admin_key.get_secret_value().encode()).digest()


@dataclass(frozen=True)
class Session:
    """A signed-in browser: whose key, until when, and the nonce its CSRF token derives from."""

    key_id: str
    tenant: str
    admin: bool
    expires_at: float
    nonce: str

    @property
    def principal(self) -> Principal:
        return Principal(key_id=self.key_id, tenant=self.tenant, admin=self.admin)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, payload: str) -> str:
    return _b64(hmac.new(secret, payload.encode(), hashlib.sha256).digest())


def new_session(principal: Principal, now: float | None = None) -> Session:
    expires = (now if now is not None else time.time()) + SESSION_S
    return Session(
        principal.key_id, principal.tenant, principal.admin, expires, secrets.token_hex(16)
    )


def encode_session(secret: bytes, session: Session) -> str:
    fields = [session.key_id, session.tenant, session.admin, session.expires_at, session.nonce]
    payload = _b64(json.dumps(fields, separators=(",", ":")).encode())
    return f"{payload}.{_mac(secret, payload)}"


def decode_session(secret: bytes, cookie: str, now: float | None = None) -> Session | None:
    """The session of a cookie this server signed and that has not expired; None else."""
    payload, _, mac = cookie.partition(".")
    if not mac or not hmac.compare_digest(mac, _mac(secret, payload)):
        return None
    try:
        key_id, tenant, admin, expires, nonce = json.loads(_unb64(payload))
    except (ValueError, TypeError):
        return None
    session = Session(str(key_id), str(tenant), bool(admin), float(expires), str(nonce))
    return session if session.expires_at > (now if now is not None else time.time()) else None


def csrf_token(secret: bytes, nonce: str) -> str:
    """The CSRF token of a session (or of a sign-in form's nonce)."""
    return _mac(secret, f"csrf\x1f{nonce}")


def csrf_ok(secret: bytes, nonce: str, given: str) -> bool:
    return bool(given) and hmac.compare_digest(given, csrf_token(secret, nonce))
