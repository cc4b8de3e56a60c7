"""What agents may do to their user's memory: save, forget, rate a message, list, search turns.

One implementation behind every door (the tool catalog in app/tools/, which HTTP and MCP are
generated from). Saving a near-duplicate of a valid memory (cosine >= NEAR_DUPLICATE_COSINE, the
seeding threshold) that says something new supersedes it (app/services/supersession.py): the
old statement is closed and kept in the memory's history, never overwritten. 0.90 is measured
by `python -m eval.near_duplicates` (docs/admin.md): it catches 8 of 10 restatements and none of
10 pairs of distinct facts that are both true (highest such pair 0.739); lower thresholds catch
more restatements but come closer to hiding a true fact. Same-slot updates ("lives in Berlin" ->
"moved to Lisbon", cosine 0.41-0.88) need an explicit `supersedes`.
Services flush, never commit: the caller owns the transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from app.adapters.cache import Cache
from app.domain import MemoryScope, as_scope
from app.errors import ConflictError, NotFoundError
from app.models import MemoryItem
from app.repositories.agent_memory import RATING_ORIGIN, AgentMemoryRepository
from app.repositories.memory import MemoryRepository
from app.repositories.usage import UsageRepository
from app.retrieval.budget import pack
from app.schemas.agent import MemoryOut, SaveMemoryResult
from app.services.admin import AdminMemoryService
from app.services.effects import admit_write, invalidate_after_commit
from app.services.embedding import EmbeddingService, Priority
from app.services.memory import MemoryInput, MemoryService, content_hash
from app.services.query import QueryItem, QueryRequest, QueryResult, QueryService
from app.services.seed import NEAR_DUPLICATE_COSINE
from app.services.supersession import SupersessionService
from app.services.usage import evict_over_cap

SAVE_ORIGIN = "save_memory"
# With a time range, the range is applied to this many ranked messages (see search_messages).
_RANGE_CANDIDATES = 100


@dataclass(frozen=True)
class Saved:
    item: MemoryItem
    action: str  # added | updated | unchanged | restored
    superseded: uuid.UUID | None = None
    # Soft-deleted by the per-user cap to make room for this one (restorable by an admin).
    evicted: tuple[MemoryItem, ...] = ()

    def result(self) -> SaveMemoryResult:
        """The save_memory answer, the same through HTTP and MCP."""
        return SaveMemoryResult(
            memory=MemoryOut.model_validate(self.item),
            action=self.action,  # type: ignore[arg-type]
            superseded=self.superseded,
            evicted=[MemoryOut.model_validate(m) for m in self.evicted],
        )


@dataclass(frozen=True)
class Rated:
    message_id: uuid.UUID
    vote: str
    action: str  # added | unchanged | restored | exists | removed
    item: MemoryItem | None = None
    removed: int = 0


class AgentMemoryService:
    def __init__(
        self,
        session: AsyncSession,
        embeddings: EmbeddingService,
        cache: Cache | None = None,
        *,
        write_limit_per_minute: int = 0,
        max_entries: int = 0,
    ) -> None:
        """With `cache`, every write is admitted against the user's write limit first and drops
        the user's cached query results once the transaction commits. `max_entries` > 0 caps
        the user's live memories: a save beyond it evicts (app/services/usage.py order)."""
        self.session = session
        self.embeddings = embeddings
        self.cache = cache
        self.write_limit_per_minute = write_limit_per_minute
        self.max_entries = max_entries
        self.repo = AgentMemoryRepository(session)
        self.memories = MemoryRepository(session)
        self.admin = AdminMemoryService(session, embeddings)

    async def save(
        self,
        user_id: str,
        content: str,
        type: str,
        *,
        importance: float | None = None,
        expires_at: datetime | None = None,
        supersedes: uuid.UUID | None = None,
        tags: Sequence[str] | None = None,
    ) -> Saved:
        """Store a memory. An identical valid one of the user is reused (or restored); one
        that replaces a memory - named by `supersedes`, or the user's nearest valid memory at
        cosine >= NEAR_DUPLICATE_COSINE - supersedes it (closed, kept as history). A memory
        added or restored beyond the user's cap evicts the least valuable others."""
        await self._write(user_id)
        if self.max_entries > 0:
            # Count and evict under the user's lock: two concurrent saves cannot both see room.
            await UsageRepository(self.session).lock_user(user_id)
        saved = await self._save(user_id, content, type, importance, expires_at, supersedes, tags)
        if saved.action in ("added", "restored") and self.max_entries > 0:
            evicted = await evict_over_cap(self.session, user_id, self.max_entries, saved.item.id)
            return replace(saved, evicted=tuple(evicted))
        return saved

    async def _save(
        self,
        user_id: str,
        content: str,
        type: str,
        importance: float | None,
        expires_at: datetime | None,
        supersedes: uuid.UUID | None,
        tags: Sequence[str] | None,
    ) -> Saved:
        digest = content_hash(content)
        # Embedded before the lock (the slow part runs in parallel), then one save of this user
        # at a time: parallel saves would each pick the same nearest memory to replace.
        (vector,) = await self.embeddings.embed([content], priority=Priority.INTERACTIVE)
        await self.repo.lock_saves(user_id)
        if supersedes is None:
            existing = await self._by_hash(user_id, digest)
            if existing is not None:
                expired = existing.expires_at is not None and existing.expires_at <= datetime.now(
                    UTC
                )
                if existing.deleted_at is None and not expired:
                    return Saved(existing, "unchanged")
                # A forgotten or expired copy of the same text: the new statement brings it back.
                values = {"deleted_at": None, "evicted_at": None, "expires_at": expires_at}
                if tags is not None:
                    values["tags"] = list(tags)
                restored = await self.admin.repo.update(user_id, existing.id, values)
                if restored is None:  # purged by a concurrent transaction
                    raise NotFoundError("memory not found")
                return Saved(restored, "restored")
        if supersedes is None:
            (near,) = await self.admin.repo.nearest(
                user_id, self.embeddings.model, [vector], min_cosine=NEAR_DUPLICATE_COSINE, k=1
            )
            supersedes = near[0][0] if near else None
        metadata = {"via": SAVE_ORIGIN}
        if supersedes is not None:
            # The new statement replaces the old one wholesale: its expiry too (None clears).
            done = await SupersessionService(self.session, self.embeddings).supersede(
                user_id,
                supersedes,
                content,
                type=type,
                importance=importance,
                expires_at=expires_at,
                source="agent",
                source_message_id=None,
                metadata=metadata,
                vector=vector,
                tags=tags,
            )
            return Saved(done.new, "updated", supersedes)
        item = MemoryInput(
            user_id=user_id,
            content=content,
            type=type,
            importance=0.5 if importance is None else importance,
            expires_at=expires_at,
            source="agent",
            metadata=metadata,
            tags=tuple(tags or ()),
        )
        created = await MemoryService(self.session, self.embeddings).store([item], [vector])
        stored = await self.memories.get(user_id, created[0]) if created else None
        if stored is None:  # the same text was stored concurrently: that one is it
            stored = await self._by_hash(user_id, digest)
            if stored is None:
                raise ConflictError("memory changed concurrently; retry")
            return Saved(stored, "unchanged")
        return Saved(stored, "added")

    async def forget(self, user_id: str, item_id: uuid.UUID) -> MemoryItem:
        """Soft-delete one of the user's memories (idempotent); 404 for any other id."""
        await self._write(user_id)
        item = await self.memories.get(user_id, item_id, include_deleted=True)
        if item is None:
            raise NotFoundError("memory not found")
        if item.deleted_at is not None:
            return item
        return await self.admin.set_deleted(user_id, item_id, True)

    async def rate(self, user_id: str, message_id: uuid.UUID, vote: str) -> Rated:
        """Up: keep the message (with the user turn an assistant reply answers) as a note.
        Down: remove the note an upvote made. Both idempotent; 404 for another user's message."""
        await self._write(user_id)
        message = await self.repo.message(user_id, message_id)
        if message is None:
            raise NotFoundError("message not found")
        made = await self.repo.rating_memories(user_id, message_id, include_deleted=True)
        if vote == "down":
            live = [m for m in made if m.deleted_at is None]
            for item in live:
                await self.admin.set_deleted(user_id, item.id, True)
            # A repeated down finds nothing left to remove: "unchanged", as a repeated up says.
            return Rated(message_id, vote, "removed" if live else "unchanged", removed=len(live))
        live = [m for m in made if m.deleted_at is None]
        if live:
            return Rated(message_id, vote, "unchanged", live[0])
        if made:
            restored = await self.admin.set_deleted(user_id, made[-1].id, False)
            return Rated(message_id, vote, "restored", restored)
        content = message.content
        if message.role == "assistant":
            question = await self.repo.turn_before(user_id, message)
            if question is not None and question.role == "user":
                content = f"User: {question.content}\nAssistant: {message.content}"
        created = await MemoryService(self.session, self.embeddings).create_many(
            [
                MemoryInput(
                    user_id=user_id,
                    content=content,
                    type="note",
                    source="rate_message",
                    source_message_id=message_id,
                    metadata={"via": RATING_ORIGIN},
                )
            ]
        )
        if created:
            item = await self.memories.get(user_id, created[0])
            assert item is not None
            return Rated(message_id, vote, "added", item)
        # The user already has this exact text as a memory (saved another way): keep that one.
        existing = await self._by_hash(user_id, content_hash(content))
        if existing is None:
            raise NotFoundError("message not found")
        if existing.deleted_at is not None:
            existing = await self.admin.set_deleted(user_id, existing.id, False)
        return Rated(message_id, vote, "exists", existing)

    async def _write(self, user_id: str) -> None:
        """Admit one write (429 over the limit, before anything is written), and have the
        user's cached query results dropped once it commits, so query_memory sees it at once."""
        if self.cache is None:
            return
        await admit_write(self.cache, user_id, self.write_limit_per_minute)
        invalidate_after_commit(self.session, self.cache, user_id)

    async def page(
        self, user_id: str, *, limit: int, offset: int, type: str | None = None
    ) -> tuple[Sequence[MemoryItem], int]:
        """The user's live memories, newest first, and how many there are."""
        return await self.repo.live_page(user_id, limit=limit, offset=offset, type=type)

    async def _by_hash(self, user_id: str, digest: str) -> MemoryItem | None:
        found = (await self.admin.repo.ids_by_hash(user_id, [digest])).get(digest)
        return None if found is None else await self.admin.repo.get(user_id, found)


async def search_messages(
    queries: QueryService,
    user: str | MemoryScope,
    query: str,
    *,
    limit: int,
    min_score: float,
    token_budget: int,
    after: datetime | None = None,
    before: datetime | None = None,
    correlation_id: str = "-",
) -> QueryResult:
    """Past conversation turns only, ranked as query_memory ranks them, optionally in a range.

    The range is applied to the best `_RANGE_CANDIDATES` ranked turns, then the kept ones are
    packed under the token budget again. (Time filters inside retrieval arrive with issue 13;
    then the range should be passed down instead.)
    """
    ranged = after is not None or before is not None
    scope = as_scope(user)
    result = await queries.query(
        QueryRequest(
            user_id=scope.user_id,
            memory=scope,
            query=query,
            limit=_RANGE_CANDIDATES if ranged else limit,
            min_score=min_score,
            sources=("message",),
            token_budget=100_000 if ranged else token_budget,
        ),
        correlation_id=correlation_id,
    )
    if not ranged:
        return result
    kept = [i for i in result.items if _within(i, after, before)][:limit]
    packed = pack([i.content for i in kept], token_budget)
    result.items = [_repacked(kept[p.index], p.text, p.tokens, p.cut) for p in packed.items]
    result.total_count = len(kept)
    result.token_count = packed.token_count
    result.truncated = packed.truncated
    return result


def _within(item: QueryItem, after: datetime | None, before: datetime | None) -> bool:
    return (after is None or item.created_at >= after) and (
        before is None or item.created_at < before
    )


def _repacked(item: QueryItem, text: str, tokens: int, cut: bool) -> QueryItem:
    return replace(item, content=text, tokens=tokens, cut=cut)
