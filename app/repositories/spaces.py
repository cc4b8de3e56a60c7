"""Shared spaces and their members' grants (migration 0019_memory_scopes).

The admin role manages both tables; the service role reads its own user's grants only (row-level
security on space_members). A space's memories are memory_items of the owner `space:<id>`.
On Citus both tables are reference tables (app/citus/): each statement here is one task,
a write of them goes to every node's copy in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Space, SpaceMember


class SpaceRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def create(self, space_id: str, description: str) -> Space | None:
        """A new space; None when one of that id exists."""
        stmt = (
            insert(Space)
            .values(id=space_id, description=description)
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(Space)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def get(self, space_id: str) -> Space | None:
        return await self.session.get(Space, space_id)

    async def list(self) -> Sequence[Space]:
        return (await self.session.execute(select(Space).order_by(Space.id))).scalars().all()

    async def delete(self, space_id: str) -> bool:
        """The space and its grants (the foreign key cascades); False when there was none. Its
        memories are its owner key's rows: SpaceService.delete purges them first."""
        gone = await self.session.execute(
            delete(Space).where(Space.id == space_id).returning(Space.id)
        )
        return gone.scalar_one_or_none() is not None

    async def grant(self, space_id: str, user_id: str, access: str) -> SpaceMember:
        """Make the user a member with `access`, or change the member's access."""
        stmt = insert(SpaceMember).values(space_id=space_id, user_id=user_id, access=access)
        stmt = stmt.on_conflict_do_update(
            index_elements=["space_id", "user_id"], set_={"access": stmt.excluded.access}
        ).returning(SpaceMember)
        return (await self.session.execute(stmt)).scalar_one()

    async def revoke(self, space_id: str, user_id: str) -> bool:
        gone = await self.session.execute(
            delete(SpaceMember)
            .where(SpaceMember.space_id == space_id, SpaceMember.user_id == user_id)
            .returning(SpaceMember.user_id)
        )
        return gone.scalar_one_or_none() is not None

    async def members(self, space_id: str) -> Sequence[SpaceMember]:
        stmt = (
            select(SpaceMember)
            .where(SpaceMember.space_id == space_id)
            .order_by(SpaceMember.user_id)
        )
        return (await self.session.execute(stmt)).scalars().all()

    async def access(self, user_id: str, space_id: str) -> str | None:
        """The user's grant on one space ("read" or "write"), None without one (as the service
        role: row-level security shows its own grants only)."""
        stmt = select(SpaceMember.access).where(
            SpaceMember.user_id == user_id, SpaceMember.space_id == space_id
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def memberships(self, user_id: str) -> Sequence[SpaceMember]:
        """The user's grants (as the service role: row-level security shows its own only)."""
        stmt = (
            select(SpaceMember).where(SpaceMember.user_id == user_id).order_by(SpaceMember.space_id)
        )
        return (await self.session.execute(stmt)).scalars().all()
