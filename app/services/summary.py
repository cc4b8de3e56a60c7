"""The rolling conversation summary as callers see it: its text and whether it is current.

The extraction worker writes it (app/extraction/summary.py); GET .../session and the chat
proxy's `memory.summary` read it through here, so both say the same thing about it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import NotFoundError
from app.repositories.conversation_settings import ConversationSettingsRepository
from app.schemas.conversation import SummaryState


@dataclass(frozen=True)
class SummaryView:
    text: str | None
    updated_at: datetime | None
    state: SummaryState


async def read_summary(
    session: AsyncSession,
    user_id: str,
    conversation_id: uuid.UUID,
    *,
    extraction_default: bool | None,
    summary_tokens: int,
) -> SummaryView:
    """`extraction_default` is the service's (None: no extraction model configured)."""
    row = await ConversationSettingsRepository(session).summary(user_id, conversation_id)
    if row is None:
        raise NotFoundError("conversation not found")
    if extraction_default is None:
        return SummaryView(None, None, "no_llm")
    active = row.extraction if row.extraction is not None else extraction_default
    if not active or summary_tokens == 0:
        return SummaryView(row.text, row.updated_at, "off")
    current = row.last_user_seq is None or (row.seq is not None and row.seq >= row.last_user_seq)
    return SummaryView(row.text, row.updated_at, "current" if current else "pending")
