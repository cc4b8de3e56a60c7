"""Passages of messages (app/retrieval/passages.py): embedded on the write paths, rebuilt here.

Passage vectors are derived data, like the keyword postings. Every path that stores messages
(append, bulk append, the chat proxy, `pgrecall import`) stores their passages in the same
transaction. `pgrecall rebuild-passages` makes them for messages written before migration
0009_passages or embedded by another model (after `pgrecall reembed`): each page of messages
is one transaction, so an interrupted rebuild resumes where it stopped.

Passage texts are embedded without the Redis cache: a purge removes the cached vectors of a
user's messages and memories by their texts, and would not know a message's sentences.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from tqdm import tqdm

from app.adapters.cache import Cache
from app.db import user_session
from app.repositories.passages import NewPassage, PassageRepository
from app.retrieval.passages import passages
from app.services.embedding import EmbeddingService, Priority

_PAGE = 500


@dataclass(frozen=True)
class PassageSource:
    id: uuid.UUID
    content: str
    metadata: Mapping[str, Any] | None


async def embed_passages(
    embeddings: EmbeddingService, messages: Sequence[PassageSource], *, priority: Priority
) -> list[NewPassage]:
    """The passages of these messages with their vectors (one embedding call; [] when none of
    them has two sentences)."""
    texts = [
        (m.id, i, t)
        for m in messages
        for i, t in enumerate(passages(m.content, (m.metadata or {}).get("speaker")))
    ]
    if not texts:
        return []
    vectors = await embeddings.embed([t for _, _, t in texts], priority=priority, cached=False)
    return [NewPassage(mid, i, vectors[n]) for n, (mid, i, _) in enumerate(texts)]


@dataclass
class PassageReport:
    users: int = 0
    messages: int = 0  # messages read (with or without passages)
    passages: int = 0  # passages written
    dropped: int = 0  # passages of another model removed
    elapsed_s: float = 0.0


async def rebuild_passages(
    sessionmaker: async_sessionmaker[AsyncSession],
    embeddings: EmbeddingService,
    users: Sequence[str],
    *,
    cache: Cache | None = None,
    progress: bool = False,
) -> PassageReport:
    """Give every message of these users its passages for the current model; the users'
    cached query results are dropped (their ranking may change)."""
    started = time.perf_counter()
    report = PassageReport()
    model = embeddings.model
    for user_id in tqdm(users, unit="user", disable=not progress, file=sys.stderr):
        async with user_session(sessionmaker, user_id) as session, session.begin():
            report.dropped += await PassageRepository(session).drop_other_models(user_id, model)
        after: uuid.UUID | None = None
        while True:
            async with user_session(sessionmaker, user_id) as session, session.begin():
                repo = PassageRepository(session)
                rows = await repo.messages_without(user_id, model, after=after, limit=_PAGE)
                if not rows:
                    break
                sources = [PassageSource(r.id, r.content, r.metadata) for r in rows]
                new = await embed_passages(embeddings, sources, priority=Priority.BULK)
                await repo.insert(user_id, model, new)
            report.messages += len(rows)
            report.passages += len(new)
            after = rows[-1].id
        if cache is not None:
            await cache.invalidate_user(user_id)
        report.users += 1
    report.elapsed_s = time.perf_counter() - started
    return report
