"""Extraction's figures for /metrics: durable ones from the tables (every process's work,
`pgrecall worker` included) and this process's counters."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import admin_sessions
from app.repositories.extraction import ExtractionStatsRepository

if TYPE_CHECKING:
    from app.extraction.runtime import Extraction

log = logging.getLogger(__name__)
TOP_USERS = 20


async def extraction_metrics(
    sessionmaker: async_sessionmaker[AsyncSession], extraction: Extraction | None
) -> dict[str, object]:
    """{"enabled": False} when off; else jobs per state, tokens per job and per user today
    (UTC), and this process's counters. A database error leaves the durable part out."""
    if extraction is None:
        return {"enabled": False}
    result: dict[str, object] = {"enabled": True, "process": extraction.metrics.snapshot()}
    day = datetime.now(UTC).date()
    try:
        async with admin_sessions(sessionmaker, "metrics: extraction totals")() as session:
            result.update(await ExtractionStatsRepository(session).summary(day, TOP_USERS))
    except (SQLAlchemyError, OSError) as exc:
        log.warning("extraction metrics unavailable: %s", type(exc).__name__)
        result["error"] = "database unavailable"
    return result
