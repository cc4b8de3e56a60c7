"""Shared spaces: create and delete them, grant and revoke members (the admin role), list a
member's own grants (docs/agents.md)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from app.domain import space_owner
from app.errors import ConflictError, NotFoundError, PermissionDeniedError
from app.models import Space, SpaceMember
from app.repositories.purge import PurgeRepository
from app.repositories.spaces import SpaceRepository


class SpaceService:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.repo = SpaceRepository(session)

    async def create(self, space_id: str, description: str = "") -> Space:
        space = await self.repo.create(space_id, description)
        if space is None:
            raise ConflictError(f"space {space_id} exists")
        return space

    async def list(self) -> Sequence[Space]:
        return await self.repo.list()

    async def delete(self, space_id: str) -> None:
        """The space with its grants and its memories (they are the space's, no member's): its
        rows go as a purged user's do (PurgeRepository.delete_user of its owner key)."""
        if await self.repo.get(space_id) is None:
            raise NotFoundError("space not found")
        await PurgeRepository(self.session).delete_user(space_owner(space_id))
        await self.repo.delete(space_id)

    async def grant(self, space_id: str, user_id: str, access: str) -> SpaceMember:
        if await self.repo.get(space_id) is None:
            raise NotFoundError("space not found")
        return await self.repo.grant(space_id, user_id, access)

    async def revoke(self, space_id: str, user_id: str) -> None:
        if not await self.repo.revoke(space_id, user_id):
            raise NotFoundError("no such member")

    async def members(self, space_id: str) -> Sequence[SpaceMember]:
        if await self.repo.get(space_id) is None:
            raise NotFoundError("space not found")
        return await self.repo.members(space_id)

    async def memberships(self, user_id: str) -> Sequence[SpaceMember]:
        return await self.repo.memberships(user_id)

    async def require(self, user_id: str, space_id: str, *, write: bool) -> None:
        """Refuse (403) a user without the grant: a clear answer before row-level security,
        which refuses the write itself, would."""
        access = await self.repo.access(user_id, space_id)
        if access is None or (write and access != "write"):
            need = "write" if write else "read"
            raise PermissionDeniedError(f"no {need} grant on space {space_id}")
