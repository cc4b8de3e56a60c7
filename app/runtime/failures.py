"""What a failure of Postgres means to a caller, one classification for every door."""

from __future__ import annotations

import asyncio

from sqlalchemy import exc as sa_exc

from app.errors import ConflictError, DatabaseUnavailableError, ServiceError


def database_error(exc: BaseException) -> ServiceError | None:
    """Classify an exception raised while talking to Postgres; None if it is not one."""
    if isinstance(exc, sa_exc.IntegrityError):
        return ConflictError("the write conflicts with stored data")
    if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)):
        return DatabaseUnavailableError("database unavailable; nothing was stored, retry later")
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return DatabaseUnavailableError("database unavailable; nothing was stored, retry later")
    # 57014: statement timeout or cancel; asyncpg's class sits behind SQLAlchemy's wrapper.
    if isinstance(exc, sa_exc.DBAPIError) and getattr(exc.orig, "sqlstate", None) == "57014":
        return DatabaseUnavailableError("database timed out; nothing was stored, retry later")
    if isinstance(exc, (OSError, asyncio.TimeoutError)):
        return DatabaseUnavailableError("database unavailable; nothing was stored, retry later")
    return None
