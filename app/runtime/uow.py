"""The unit of work: one transaction, committed or rolled back, then its after-commit hooks.

Services register what must follow a commit (cache refreshes, never data) with
`app.db.after_commit`; only a transaction opened here runs those hooks, so every door opens its
sessions through these functions and none builds one itself.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import AFTER_COMMIT, admin_sessions, user_session
from app.domain import MemoryScope

log = logging.getLogger(__name__)


@asynccontextmanager
async def transaction(session: AsyncSession) -> AsyncIterator[AsyncSession]:
    """Commit when the block ends, roll back on error; then run the after-commit hooks.

    A door answers after the block, so a write is never acknowledged unless it is committed.
    """
    async with session:
        try:
            yield session
        except BaseException:
            await session.rollback()
            raise
        await session.commit()
        for hook in session.info.pop(AFTER_COMMIT, []):
            try:
                await hook()
            except Exception:  # a cache refresh must not fail a committed write
                log.warning("after-commit hook failed", exc_info=True)


def user_transaction(
    sessionmaker: async_sessionmaker[AsyncSession], user: str | MemoryScope
) -> AbstractAsyncContextManager[AsyncSession]:
    """A transaction as the user (within the scope's agent and run, MemoryScope): row-level
    security shows it that user's rows only (and the spaces it has grants on)."""
    return transaction(user_session(sessionmaker, user))


def admin_transaction(
    sessionmaker: async_sessionmaker[AsyncSession], reason: str
) -> AbstractAsyncContextManager[AsyncSession]:
    """A transaction in the audited admin mode (every user's rows), `reason` in the audit log."""
    return transaction(admin_sessions(sessionmaker, reason)())
