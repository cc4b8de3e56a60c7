"""A deterministic test-only embedder (re-embed tests need a second model of the same width)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from app.adapters.embedder import Vectors
from app.errors import EmbeddingError


def fake_vector(text: str, dimension: int = 384) -> Vectors:
    """A unit vector determined by the text's hash."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    v = np.random.default_rng(seed).standard_normal(dimension).astype(np.float32)
    return v / np.linalg.norm(v)


class FakeEmbedder:
    """Unit vectors from a hash, model "fake-384"; optionally fails after N calls."""

    model = "fake-384"
    dimension = 384

    def __init__(self, fail_after_calls: int | None = None) -> None:
        self.fail_after_calls = fail_after_calls
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        if self.fail_after_calls is not None and self.calls > self.fail_after_calls:
            raise EmbeddingError("fake embedder: simulated outage")
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([fake_vector(t, self.dimension) for t in texts])
