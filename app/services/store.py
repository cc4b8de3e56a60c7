"""Key-addressable memories for the framework adapters (the LangGraph store).

An item is a JSON value at (namespace, key) within one user, stored as a memory item so that
query_memory finds it like any other memory:
- its text (what is embedded and keyword-indexed) is the value's `content` or `text` field when
  that is a non-blank string, else the whole value as JSON;
- its memory type is the namespace's last label when that is a memory type
  (`("memories", "preference")` -> preference), else `note`;
- a put that changes the value at a key closes the current version and stores the new one
  linked to it (`supersedes_id`), so the history keeps every value the key had
  (`GET /v1/memories/{id}/history`); a put of the same value changes nothing; a put on a
  deleted key starts a new version after the deleted one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.adapters.cache import Cache
from app.domain import MEMORY_TYPES
from app.errors import NotFoundError
from app.models import MemoryItem
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.repositories.store import TTL, UNINDEXED, StoreRepository, expiry
from app.services.effects import invalidate_after_commit
from app.services.embedding import EmbeddingService, Priority

SEPARATOR = "."
WILDCARD = "*"
STORE_SOURCE = "store"


def joined(namespace: Sequence[str]) -> str:
    """The stored form of a namespace (labels never contain the separator)."""
    return SEPARATOR.join(namespace)


def split(namespace: str) -> list[str]:
    return namespace.split(SEPARATOR)


def memory_type(namespace: Sequence[str]) -> str:
    return namespace[-1] if namespace and namespace[-1] in MEMORY_TYPES else "note"


def item_text(value: dict[str, Any]) -> str:
    """What query_memory matches the item on."""
    for field in ("content", "text"):
        candidate = value.get(field)
        if isinstance(candidate, str) and candidate.strip():
            return candidate
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def address_hash(namespace: str, key: str) -> str:
    """content_hash of a store item: its address, so equal values at two keys never collide
    (ordinary memories hash their text; the 'store' prefix keeps the two domains apart)."""
    return hashlib.sha256(f"store\x1f{namespace}\x1f{key}".encode()).hexdigest()


KEY_CREATED = "key_created_at"


def key_created_at(item: MemoryItem) -> datetime:
    """When the item's key was first stored (a new version keeps its key's first time)."""
    first = item.metadata_.get(KEY_CREATED)
    return datetime.fromisoformat(first) if isinstance(first, str) else item.created_at


def _matches(labels: Sequence[str], pattern: Sequence[str]) -> bool:
    return len(labels) >= len(pattern) and all(
        p in (WILDCARD, label) for label, p in zip(labels, pattern, strict=False)
    )


def match_namespaces(
    namespaces: Sequence[Sequence[str]],
    prefix: Sequence[str],
    suffix: Sequence[str],
    max_depth: int | None,
    limit: int,
    offset: int,
) -> list[list[str]]:
    """LangGraph's list_namespaces: filter by prefix and suffix ('*' matches any label),
    truncate to max_depth, deduplicate, sort, page."""
    found: set[tuple[str, ...]] = set()
    for labels in namespaces:
        if not _matches(labels, prefix):
            continue
        if suffix and not _matches(list(reversed(labels)), list(reversed(suffix))):
            continue
        found.add(tuple(labels[:max_depth] if max_depth is not None else labels))
    return [list(n) for n in sorted(found)[offset : offset + limit]]


def _expired(item: MemoryItem) -> bool:
    return item.expires_at is not None and item.expires_at <= datetime.now(UTC)


@dataclass(frozen=True)
class Found:
    item: MemoryItem
    score: float | None = None


class StoreService:
    def __init__(
        self, session: AsyncSession, embeddings: EmbeddingService, cache: Cache | None = None
    ) -> None:
        """With `cache`, a write drops the user's cached query results once it commits
        (query_memory returns store items like any other memory)."""
        self.session = session
        self.repo = StoreRepository(session)
        self.index = SearchIndexRepository(session)
        self.embeddings = embeddings
        self.cache = cache

    async def put(
        self,
        user_id: str,
        namespace: Sequence[str],
        key: str,
        value: dict[str, Any],
        *,
        index: bool = True,
        ttl: float | None = None,
    ) -> MemoryItem:
        """Store the value at the address, embedded and indexed; the version it replaces is
        closed and kept as history. An unchanged value returns the current version as it is
        (its TTL restarted). `index=False`: the store's search by meaning skips the item and
        it is not keyword-indexed. `ttl`: minutes until it expires (reads may restart it)."""
        text = item_text(value)
        address = joined(namespace)
        metadata: dict[str, Any] = {"value": value}
        if ttl is not None:
            metadata[TTL] = ttl
        if not index:
            metadata[UNINDEXED] = True
        current = await self.repo.get(user_id, address, key, include_deleted=True)
        if (
            current is not None
            and current.deleted_at is None
            and not _expired(current)
            and current.content == text
            and {k: v for k, v in current.metadata_.items() if k != KEY_CREATED} == metadata
        ):
            if ttl is not None:
                await self.repo.refresh_ttl(user_id, [current.id])
                return await self._written(user_id, address, key)
            return current
        invalidate_after_commit(self.session, self.cache, user_id)
        (vector,) = await self.embeddings.embed([text], priority=Priority.INTERACTIVE)
        fields: dict[str, Any] = {
            "content": text,
            "content_hash": address_hash(address, key),
            "type": memory_type(namespace),
            "embedding": vector,
            "embedding_model": self.embeddings.model,
            "source": STORE_SOURCE,
            "metadata_": metadata,
            "expires_at": expiry(ttl),
        }
        if current is not None:
            # A version's created_at is when it became valid; the key keeps its first one.
            fields["metadata_"][KEY_CREATED] = key_created_at(current).isoformat()
        replaced = await self.repo.close_current(user_id, address, key)
        if replaced is not None:
            fields["supersedes_id"] = replaced
        # A put racing this one on a new key meets this row in the upsert and replaces it.
        item_id, inserted = await self.repo.upsert(user_id, address, key, fields)
        if not inserted:
            await self.index.unindex(user_id, [item_id])
        if index:
            await self.index.index(user_id, [Document(item_id, Source.MEMORY, text)])
        return await self._written(user_id, address, key)

    async def _written(self, user_id: str, address: str, key: str) -> MemoryItem:
        """The version a put just wrote, even if its TTL is so short it has expired already."""
        item = await self.repo.get(user_id, address, key, include_deleted=True)
        if item is None:  # the put's own row: only a concurrent delete of the user could do it
            raise NotFoundError("store item not found")
        return item

    async def get(
        self, user_id: str, namespace: Sequence[str], key: str, *, refresh_ttl: bool = False
    ) -> MemoryItem:
        """The live item at the address, or NotFoundError (also for other users' addresses
        and expired items). `refresh_ttl` restarts its TTL."""
        item = await self.repo.get(user_id, joined(namespace), key)
        if item is None:
            raise NotFoundError("store item not found")
        if refresh_ttl and TTL in item.metadata_:
            await self.repo.refresh_ttl(user_id, [item.id])
            item = await self.repo.get(user_id, joined(namespace), key)
            if item is None:  # deleted between the two reads
                raise NotFoundError("store item not found")
        return item

    async def sweep(self, user_id: str) -> int:
        """Delete the user's expired items (they are already gone for reads)."""
        swept = await self.repo.sweep(user_id)
        if swept:
            invalidate_after_commit(self.session, self.cache, user_id)
        return swept

    async def delete(self, user_id: str, namespace: Sequence[str], key: str) -> bool:
        """Soft-delete the item (as forget_memory does); False when nothing live was there."""
        deleted = await self.repo.delete(user_id, joined(namespace), key) is not None
        if deleted:
            invalidate_after_commit(self.session, self.cache, user_id)
        return deleted

    async def search(
        self,
        user_id: str,
        prefix: Sequence[str],
        query: str | None,
        value_filter: dict[str, Any] | None,
        *,
        limit: int,
        offset: int,
        refresh_ttl: bool = False,
    ) -> list[Found]:
        """Items under the prefix: by similarity to `query` when given, else newest first.
        `refresh_ttl` restarts the found items' TTLs (they are read again to show it)."""
        vector = None
        if query is not None:
            (vector,) = await self.embeddings.embed([query], priority=Priority.INTERACTIVE)
        found = await self._search(user_id, prefix, vector, value_filter, limit, offset)
        ids = [f.item.id for f in found if TTL in f.item.metadata_]
        if not refresh_ttl or not ids:
            return found
        await self.repo.refresh_ttl(user_id, ids)
        return await self._search(user_id, prefix, vector, value_filter, limit, offset)

    async def _search(
        self,
        user_id: str,
        prefix: Sequence[str],
        vector: Any,
        value_filter: dict[str, Any] | None,
        limit: int,
        offset: int,
    ) -> list[Found]:
        address = joined(prefix)
        if vector is None:
            rows = await self.repo.newest(
                user_id, address, value_filter, limit=limit, offset=offset
            )
            return [Found(row) for row in rows]
        ranked = await self.repo.nearest(
            user_id,
            address,
            value_filter,
            vector,
            self.embeddings.model,
            limit=limit,
            offset=offset,
        )
        return [Found(row, score) for row, score in ranked]

    async def namespaces(
        self,
        user_id: str,
        prefix: Sequence[str],
        suffix: Sequence[str],
        max_depth: int | None,
        *,
        limit: int,
        offset: int,
    ) -> list[list[str]]:
        """The user's namespaces that match, as LangGraph's list_namespaces."""
        stored = [split(n) for n in await self.repo.namespaces(user_id)]
        return match_namespaces(stored, prefix, suffix, max_depth, limit, offset)
