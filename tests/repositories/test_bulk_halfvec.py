"""COPY of memory items through BulkRepository's binary halfvec codec (app/vectors.py,
encode_halfvec), read back from the real server: each value as Postgres rounds it to half
precision, the same as a vector sent as text."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg
import numpy as np

from app.embedded import EmbeddedPostgres
from app.repositories.bulk import BulkMemory, BulkRepository
from app.vectors import vector_literal
from tests.helpers import as_stored


async def test_copied_vectors_read_back_as_their_half_precision_values(
    pg: EmbeddedPostgres, user_id: str
) -> None:
    rng = np.random.default_rng(3)
    vectors = [rng.standard_normal(384).astype(np.float32) * 0.05 for _ in range(3)]
    rows = [
        BulkMemory(
            uuid.uuid4(),
            user_id,
            f"copied {i}",
            f"copied-{i}",
            "note",
            v,
            "m",
            0.5,
            datetime.now(UTC),
        )
        for i, v in enumerate(vectors)
    ]
    conn = await asyncpg.connect(pg.dsn)
    transaction = conn.transaction()  # rolled back: the test leaves nothing behind
    await transaction.start()
    try:
        repo = BulkRepository(conn)
        await repo.register_codecs()
        assert await repo.copy_memories(rows) == 3
        for row, vector in zip(rows, vectors, strict=True):
            stored, as_text = await conn.fetchrow(
                "SELECT embedding::text, "
                "embedding = CAST(CAST($2 AS text) AS halfvec) FROM memory_items "
                "WHERE user_id = $1 AND id = $3",
                user_id,
                vector_literal(vector),
                row.id,
            )
            values = np.array(stored.strip("[]").split(","), dtype=np.float32)
            np.testing.assert_array_equal(values, as_stored(vector))
            assert as_text  # COPY's binary form and the text form store the same halves
    finally:
        await transaction.rollback()
        await conn.close()
