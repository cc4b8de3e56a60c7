"""Console sign-in: signed session cookies, per-session CSRF tokens, the login nonce.

A session is a signed token, not a server-side record: `<session id>.<expiry>.<hmac>` with
HMAC-SHA256 under a key derived from the admin key, so every replica accepts it, it survives a
restart, and changing the admin key ends every session at once. Logout revokes the session id
in this process (kept until the token would have expired anyway). With no keys configured
(the loopback-only default) the signing key is random per process.

The CSRF token of a session is HMAC(key, "csrf:" + session id): every form carries it and every
POST is refused without it. The login form has no session yet; it carries a nonce that must
match a short-lived cookie (double submit), and the cookies are SameSite=Strict besides.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

SESSION_COOKIE = "pgrecall_console"
LOGIN_COOKIE = "pgrecall_console_login"
SESSION_TTL_S = 8 * 3600
LOGIN_TTL_S = 15 * 60


@dataclass(frozen=True)
class ConsoleSession:
    """A signed-in admin: the session id (audit), its CSRF token and when it ends."""

    id: str
    csrf: str
    expires: int

    @property
    def audit_id(self) -> str:
        """A short, non-secret name of the session for the audit log."""
        return hashlib.sha256(self.id.encode()).hexdigest()[:12]


class ConsoleAuth:
    """Issues and checks console sessions; holds no per-request state."""

    def __init__(self, admin_key: str | None, *, open_mode: bool) -> None:
        """`admin_key` None with `open_mode` True: no keys configured, the console is open on
        loopback; `admin_key` None otherwise: the console is disabled (no admin key)."""
        self.open_mode = open_mode
        self.enabled = open_mode or admin_key is not None
        self._admin_key = admin_key
        seed = admin_key.encode() if admin_key is not None else secrets.token_bytes(32)
        self._key = hmac.new(seed, b"pgrecall console session v1", hashlib.sha256).digest()
        self._revoked: dict[str, int] = {}

    def check_key(self, typed: str) -> bool:
        """The typed admin key is right (constant time); always True in open mode."""
        if self.open_mode:
            return True
        if self._admin_key is None:
            return False
        return hmac.compare_digest(typed.encode(), self._admin_key.encode())

    def _sign(self, payload: str) -> str:
        return hmac.new(self._key, payload.encode(), hashlib.sha256).hexdigest()

    def issue(self, now: float | None = None) -> tuple[str, ConsoleSession]:
        """A new session: (cookie value, session)."""
        sid = secrets.token_urlsafe(24)
        expires = int(now if now is not None else time.time()) + SESSION_TTL_S
        payload = f"{sid}.{expires}"
        return f"{payload}.{self._sign(payload)}", self._session(sid, expires)

    def _session(self, sid: str, expires: int) -> ConsoleSession:
        return ConsoleSession(sid, self._sign(f"csrf:{sid}"), expires)

    def verify(self, cookie: str | None, now: float | None = None) -> ConsoleSession | None:
        """The session a cookie proves, or None (missing, forged, expired, revoked)."""
        if not cookie or not self.enabled:
            return None
        parts = cookie.split(".")
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        sid, expires, signature = parts[0], int(parts[1]), parts[2]
        if not hmac.compare_digest(signature, self._sign(f"{sid}.{expires}")):
            return None
        current = now if now is not None else time.time()
        if expires <= current or sid in self._revoked:
            return None
        return self._session(sid, expires)

    def revoke(self, session: ConsoleSession, now: float | None = None) -> None:
        """Logout: the session id is refused from now on (in this process)."""
        current = now if now is not None else time.time()
        self._revoked = {s: e for s, e in self._revoked.items() if e > current}
        self._revoked[session.id] = session.expires

    @staticmethod
    def csrf_ok(session: ConsoleSession, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), session.csrf.encode())

    @staticmethod
    def login_nonce() -> str:
        return secrets.token_urlsafe(24)

    @staticmethod
    def csrf_nonce_ok(cookie: str, posted: str | None) -> bool:
        """The login form's nonce matches its cookie (double submit)."""
        return posted is not None and hmac.compare_digest(cookie.encode(), posted.encode())
