"""Engine and session factories.

Vectors travel in pgvector's text form: the ORM's Vector type renders them, and raw SQL casts a
`vector_literal()` string. (pgvector's binary asyncpg codec would clash with the ORM type.)"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)


def create_engine(
    url: str, *, pool_size: int = 10, statement_timeout_ms: int = 5000
) -> AsyncEngine:
    """An asyncpg engine with a server-side statement timeout."""
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,  # queries may hold two connections each: see Resources.query_slots
        pool_pre_ping=True,
        pool_timeout=5,
        connect_args={
            "timeout": 5,
            "command_timeout": max(1, statement_timeout_ms // 1000 + 5),
            "server_settings": {
                "statement_timeout": str(statement_timeout_ms),
                "application_name": "pgrecall",
            },
        },
    )
    return engine


def vector_literal(vector: Any) -> str:
    """pgvector's text form of a vector, for `CAST(:param AS vector)` in raw SQL."""
    values = np.asarray(vector, dtype=np.float32)
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions that keep loaded attributes after commit (responses are built after it)."""
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
