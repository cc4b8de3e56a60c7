"""Rebuild users' keyword postings from their stored memories and messages.

The keyword index is derived data: a change to how documents are made (a turn's speaker, its
neighbours' weight) reaches rows written before it only through a rebuild. Each user is one
transaction: the user's postings and statistics are dropped and made again exactly as the
write paths make them, so a failure leaves that user's index as it was.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from tqdm import tqdm

from app.adapters.cache import Cache
from app.db import admin_sessions, user_session
from app.domain import ContextWeights
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.repositories.users import UserDirectoryRepository
from app.services.conversation import conversation_documents

_PAGE = 1000


@dataclass
class KeywordReport:
    users: int = 0
    documents: int = 0
    elapsed_s: float = 0.0
    per_user: dict[str, int] = field(default_factory=dict)


async def all_users(sessionmaker: async_sessionmaker[AsyncSession]) -> list[str]:
    """Every user with stored conversations or memories, in id order."""
    sessions = admin_sessions(sessionmaker, "rebuild keywords")  # lists every user
    users: list[str] = []
    async with sessions() as session:
        directory = UserDirectoryRepository(session)
        while True:
            page, total = await directory.page("", limit=_PAGE, offset=len(users))
            users += page
            if not page or len(users) >= total:
                return users


async def rebuild_user(
    session: AsyncSession, user_id: str, weights: ContextWeights = ContextWeights()
) -> int:
    """Drop and rebuild one user's postings in the caller's transaction, the context of each
    turn counted with `weights`; documents made."""
    index = SearchIndexRepository(session, weights)
    memories, messages = await index.sources(user_id)
    documents = [Document(m.id, Source.MEMORY, m.content) for m in memories]
    documents += conversation_documents(
        [(m.id, m.conversation_id, m.content, m.metadata) for m in messages]
    )
    await index.clear(user_id)
    await index.index(user_id, documents)
    return len(documents)


async def rebuild_keywords(
    sessionmaker: async_sessionmaker[AsyncSession],
    users: Sequence[str] | None = None,
    *,
    cache: Cache | None = None,
    progress: bool = False,
    weights: ContextWeights = ContextWeights(),
) -> KeywordReport:
    """Rebuild the named users' postings (every user when None), one transaction each, with
    `weights` for the turns' context (a preset's `context_weights`); their cached query results
    are dropped after each commit (the ranking may change)."""
    started = time.perf_counter()
    chosen = list(users) if users is not None else await all_users(sessionmaker)
    report = KeywordReport()
    for user_id in tqdm(chosen, unit="user", disable=not progress, file=sys.stderr):
        async with user_session(sessionmaker, user_id) as session, session.begin():
            made = await rebuild_user(session, user_id, weights)
        if cache is not None:
            await cache.invalidate_user(user_id)
        report.users += 1
        report.documents += made
        report.per_user[user_id] = made
    report.elapsed_s = time.perf_counter() - started
    return report
