"""The user directory (admin console): users and what each of them holds."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.repositories.users import UserCounts, UserDirectoryRepository


class UserDirectoryService:
    def __init__(self, session: AsyncSession) -> None:
        self.repo = UserDirectoryRepository(session)

    async def page(self, contains: str, *, limit: int, offset: int) -> tuple[list[UserCounts], int]:
        """A page of users whose id contains `contains`, with their counts, and the total."""
        ids, total = await self.repo.page(contains, limit=limit, offset=offset)
        return await self.repo.counts(ids), total

    async def counts(self, user_id: str) -> UserCounts:
        """One user's counts (zeros for an id that holds nothing)."""
        (counts,) = await self.repo.counts([user_id])
        return counts
