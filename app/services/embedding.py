"""Embedding with the Redis cache in front: every embedding call of the service goes here.

Callers say whose work it is: `Priority.INTERACTIVE` (a query, a single write someone waits
for) or `Priority.BULK` (imports, seeding, re-embedding). The scheduler keeps bulk work from
delaying interactive work (app/adapters/embed_scheduler.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from app.adapters.embed_scheduler import EmbedScheduler, Priority
from app.adapters.embedder import Embedder, Vectors

if TYPE_CHECKING:
    from app.adapters.cache import Cache

log = logging.getLogger(__name__)

__all__ = ["EmbeddingService", "Priority"]


class EmbeddingService:
    """Looks texts up in the cache, embeds the misses in one batch, stores them back."""

    def __init__(self, embedder: Embedder, cache: Cache | None = None) -> None:
        self.embedder = embedder
        self.cache = cache
        self.scheduler = EmbedScheduler.for_embedder(embedder)

    @property
    def model(self) -> str:
        return self.embedder.model

    @property
    def dimension(self) -> int:
        return self.embedder.dimension

    async def _cached(self, texts: Sequence[str]) -> list[Vectors | None]:
        """Cached vectors only (None where missing)."""
        if self.cache is None or not texts:
            return [None] * len(texts)
        return list(await self.cache.get_embeddings(self.model, texts))

    async def embed(
        self,
        texts: Sequence[str],
        *,
        priority: Priority,
        cached: bool = True,
        read_cache: bool = True,
    ) -> Vectors:
        """Unit vectors for `texts`, from the cache where possible; raises EmbeddingError.

        cached=False neither reads nor writes the cache: for derived texts (a message's
        passages) that no purge would know to remove from Redis. read_cache=False skips the
        read only: the caller has looked the texts up already and missed (Cache.admit_query).
        """
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if not cached:
            return await self.scheduler.embed(list(texts), priority)
        found = await self._cached(texts) if read_cache else [None] * len(texts)
        missing = [i for i, vec in enumerate(found) if vec is None]
        result = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, vec in enumerate(found):
            if vec is not None:
                result[i] = vec
        if missing:
            fresh = await self.scheduler.embed([texts[i] for i in missing], priority)
            result[missing] = fresh
            if self.cache is not None:
                await self.cache.set_embeddings(self.model, [texts[i] for i in missing], fresh)
        return result
