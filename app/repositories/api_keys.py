"""API keys. `find_by_hash` is the one statement authentication runs (kept alone so row-level
security can wrap it)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import ApiKey


class ApiKeyRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def find_by_hash(self, key_hash: str) -> ApiKey | None:
        """The key with this token hash, whatever its state (the unique hash index)."""
        stmt = select(ApiKey).where(ApiKey.key_hash == key_hash)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def insert(
        self,
        *,
        key_hash: str,
        prefix: str,
        user_id: str,
        scope: str,
        expires_at: datetime | None,
        agent_id: str | None = None,
    ) -> ApiKey:
        key = ApiKey(
            id=uuid.uuid4(),
            key_hash=key_hash,
            prefix=prefix,
            user_id=user_id,
            scope=scope,
            expires_at=expires_at,
            agent_id=agent_id,
        )
        self.session.add(key)
        await self.session.flush()
        await self.session.refresh(key)
        return key

    async def list(
        self, user_id: str | None, *, limit: int | None = None, offset: int = 0
    ) -> Sequence[ApiKey]:
        """Keys, newest first; one user's when given (an admin listing); a page when limited."""
        stmt = select(ApiKey).order_by(ApiKey.created_at.desc(), ApiKey.id)
        if user_id is not None:
            stmt = stmt.where(ApiKey.user_id == user_id)
        if limit is not None:
            stmt = stmt.limit(limit).offset(offset)
        return (await self.session.execute(stmt)).scalars().all()

    async def revoke(self, key_id: uuid.UUID) -> ApiKey | None:
        """Mark revoked (keeping the first revocation time); None if no such key."""
        stmt = (
            update(ApiKey)
            .where(ApiKey.id == key_id)
            .values(revoked_at=func.coalesce(ApiKey.revoked_at, func.now()))
            .returning(ApiKey)
            .execution_options(populate_existing=True)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def touch(self, key_id: uuid.UUID) -> None:
        """Record a use (called at most once per cache period per process)."""
        await self.session.execute(
            update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=func.now())
        )
