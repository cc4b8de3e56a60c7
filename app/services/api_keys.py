"""Per-user API keys: create (the token is shown once), list, revoke, and authenticate.

A token is `pgr_` + 32 random bytes (URL-safe base64). Only its SHA-256 is stored: the token
has 256 bits of entropy, so a plain fast hash is enough (no password stretching needed), and
lookup is by that hash through a unique index.

Authentication caches each hash's key row in the process for `ttl_s` seconds, so a request
costs a dictionary lookup; a revocation (or a new expiry) is therefore seen by a running
service within `ttl_s` seconds. Expiry itself is checked on every request against the clock.
With the cache on, concurrent requests with one key that is not cached yet share one lookup: a
burst (an agent opening its 10 MCP streams at once, 1,000 clients reconnecting) costs one
database round trip per key, not one per request, and cannot empty the connection pool.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import re
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import after_commit, key_lookup_session
from app.domain import MemoryScope
from app.errors import AuthenticationError, NotFoundError, PermissionDeniedError
from app.models import ApiKey
from app.repositories.api_keys import ApiKeyRepository

TOKEN_PREFIX = "pgr_"
_SHOWN_PREFIX = 12  # "pgr_" + 8 characters, enough to tell keys apart in a listing
_CACHE_SIZE = 10_000
_DURATION = re.compile(r"^(\d{1,6})([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}

READ = "read"
WRITE = "write"


@dataclass(frozen=True)
class Caller:
    """Who a request acts for: the user every statement is scoped to, and what it may do.

    `key_id` is set when the user comes from a per-user key (the credential fixes the user);
    None when a trusted caller (service or admin key, or no auth configured) named the user.
    """

    user_id: str
    scope: str = WRITE
    key_id: uuid.UUID | None = None
    # The memory scope within the user's (MemoryScope, docs/agents.md): the agent a key is
    # bound to or the request names, its run, whether it reads its own rows only, and the
    # shared spaces a query reads besides.
    agent_id: str | None = None
    run_id: str | None = None
    own: bool = False
    spaces: tuple[str, ...] = ()

    @property
    def can_write(self) -> bool:
        return self.scope == WRITE

    @property
    def memory(self) -> MemoryScope:
        """The scope every statement of the call runs in."""
        return MemoryScope(self.user_id, self.agent_id, self.run_id, self.own, self.spaces)


def hash_token(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def looks_like_key(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX)


def parse_duration(value: str) -> timedelta:
    """`30d`, `12h`, `90m`, `2w` -> a timedelta; ValueError otherwise."""
    match = _DURATION.fullmatch(value.strip())
    if match is None or int(match.group(1)) == 0:
        raise ValueError("must be a positive number followed by m, h, d or w (e.g. 30d)")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    token: str  # shown once; never stored


class ApiKeyService:
    def __init__(self, session: AsyncSession, keys: KeyAuthenticator | None = None) -> None:
        """With `keys` (this process's key cache), a revoke empties it once committed, so this
        process refuses the key at once (others within their cache period)."""
        self.session = session
        self.repo = ApiKeyRepository(session)
        self.keys = keys

    async def create(
        self,
        user_id: str,
        scope: str = WRITE,
        expires_in: timedelta | None = None,
        agent_id: str | None = None,
    ) -> CreatedKey:
        """A new key for the user (bound to one agent, with `agent_id`: its holder reads and
        writes as that agent only); the token is returned here and nowhere else."""
        if scope not in (READ, WRITE):
            raise ValueError("scope must be read or write")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        expires_at = datetime.now(UTC) + expires_in if expires_in is not None else None
        key = await self.repo.insert(
            key_hash=hash_token(token),
            prefix=token[:_SHOWN_PREFIX],
            user_id=user_id,
            scope=scope,
            expires_at=expires_at,
            agent_id=agent_id,
        )
        return CreatedKey(key, token)

    async def list(
        self, user_id: str | None = None, *, limit: int | None = None, offset: int = 0
    ) -> Sequence[ApiKey]:
        """All keys (or one user's), newest first; a page when limited."""
        return await self.repo.list(user_id, limit=limit, offset=offset)

    async def revoke(self, key_id: uuid.UUID) -> ApiKey:
        """Revoke a key for good (idempotent)."""
        key = await self.repo.revoke(key_id)
        if key is None:
            raise NotFoundError("key not found")
        if self.keys is not None:
            keys = self.keys

            async def forget() -> None:
                keys.forget()

            after_commit(self.session, forget)
        return key


@dataclass(frozen=True)
class _KeyState:
    id: uuid.UUID
    key_hash: str
    user_id: str
    scope: str
    expires_at: datetime | None
    revoked: bool
    agent_id: str | None = None


class KeyAuthenticator:
    """Token -> Caller, through a small in-process cache of key rows (see the module doc)."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        ttl_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.ttl_s = ttl_s
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, _KeyState | None]] = OrderedDict()
        self._lookups: dict[str, asyncio.Task[_KeyState | None]] = {}  # under way, by hash

    async def authenticate(self, token: str) -> Caller:
        """The caller a per-user key stands for.

        Unknown token: PermissionDeniedError (403, like a wrong service key). Revoked or expired
        key: AuthenticationError (401: the credential is no longer valid).
        """
        digest = hash_token(token)
        state = await self._state(digest)
        # The lookup was by hash already; compare in constant time anyway, so no code path
        # ever branches on a partial match of secret material.
        if state is None or not hmac.compare_digest(state.key_hash, digest):
            raise PermissionDeniedError("invalid API key")
        if state.revoked:
            raise AuthenticationError("API key revoked")
        if state.expires_at is not None and state.expires_at <= datetime.now(UTC):
            raise AuthenticationError("API key expired")
        return Caller(
            user_id=state.user_id, scope=state.scope, key_id=state.id, agent_id=state.agent_id
        )

    def forget(self) -> None:
        """Drop every cached key row (tests, and after a local revoke)."""
        self._cache.clear()

    async def _state(self, digest: str) -> _KeyState | None:
        now = self._clock()
        hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        if self.ttl_s <= 0:  # no cache: every request reads the row itself
            return await self._lookup(digest, now)
        lookup = self._lookups.get(digest)
        if lookup is None:
            lookup = asyncio.ensure_future(self._lookup(digest, now))
            self._lookups[digest] = lookup
            lookup.add_done_callback(functools.partial(self._looked_up, digest))
        # Shielded: a caller that goes away (a cancelled request) leaves the others' lookup.
        return await asyncio.shield(lookup)

    def _looked_up(self, digest: str, lookup: asyncio.Task[_KeyState | None]) -> None:
        self._lookups.pop(digest, None)
        if not lookup.cancelled():
            lookup.exception()  # retrieved here too, in case every caller has gone

    async def _lookup(self, digest: str, now: float) -> _KeyState | None:
        async with key_lookup_session(self.sessionmaker, digest) as session, session.begin():
            repo = ApiKeyRepository(session)
            key = await repo.find_by_hash(digest)
            state = None
            if key is not None:
                state = _KeyState(
                    key.id,
                    key.key_hash,
                    key.user_id,
                    key.scope,
                    key.expires_at,
                    key.revoked_at is not None,
                    key.agent_id,
                )
                if not state.revoked:
                    await repo.touch(key.id)
        if self.ttl_s > 0:
            self._cache[digest] = (now, state)
            self._cache.move_to_end(digest)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return state
