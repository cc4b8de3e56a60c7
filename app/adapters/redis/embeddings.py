"""Cached embedding vectors: one key per (model, text), little-endian float32 bytes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from redis.asyncio import Redis

from app.adapters.redis.breaker import GuardedRedis, sha256_hex

Vector = npt.NDArray[np.float32]
# Stored vectors are little-endian float32, whatever the host byte order.
_VECTOR_DTYPE = np.dtype("<f4")


def _decode_vector(raw: bytes | None) -> Vector | None:
    if raw is None or len(raw) % _VECTOR_DTYPE.itemsize:
        return None  # a truncated value is a miss, not a wrong vector
    # astype copies: callers get a writable native array, not a view of the reply bytes.
    return np.frombuffer(raw, dtype=_VECTOR_DTYPE).astype(np.float32)


class EmbeddingCache(GuardedRedis):
    """get/set/delete_embeddings of `Cache`."""

    embedding_ttl_s: int

    @staticmethod
    def embedding_key(model: str, text: str) -> str:
        """Key of the cached vector of `text` embedded by `model`."""
        return f"embedding_cache:{sha256_hex(model + ':' + text)}"

    async def get_embeddings(self, model: str, texts: Sequence[str]) -> list[Vector | None]:
        """Cached vectors for `texts` (None per miss) with one MGET."""
        misses: list[Vector | None] = [None] * len(texts)
        if self._redis is None or not texts:
            return misses
        keys = [self.embedding_key(model, text) for text in texts]
        raw = await self._guarded("get_embeddings", lambda r: r.mget(keys), None)
        vectors = misses if raw is None else [_decode_vector(value) for value in raw]
        hits = sum(vector is not None for vector in vectors)
        self.stats.embedding_hits += hits
        self.stats.embedding_misses += len(texts) - hits
        return vectors

    async def set_embeddings(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store one vector per text (rows of `vectors`) with the embedding TTL."""
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"expected {len(texts)} vector rows, got shape {vectors.shape}")
        if self._redis is None or not texts:
            return
        rows = np.ascontiguousarray(vectors, dtype=_VECTOR_DTYPE)

        async def store(r: Redis) -> None:
            async with r.pipeline(transaction=False) as pipe:
                for text, row in zip(texts, rows, strict=True):
                    pipe.set(
                        self.embedding_key(model, text), row.tobytes(), ex=self.embedding_ttl_s
                    )
                await pipe.execute()

        await self._guarded("set_embeddings", store, None)

    async def delete_embeddings(self, model: str, texts: Sequence[str]) -> int:
        """Drop cached vectors; returns how many existed (0 when Redis is not used)."""
        if self._redis is None or not texts:
            return 0
        keys = [self.embedding_key(model, text) for text in texts]
        return await self._guarded("delete_embeddings", lambda r: r.delete(*keys), 0)
