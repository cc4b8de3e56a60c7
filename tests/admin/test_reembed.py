"""Re-embedding: batches commit, an interruption loses nothing, a restart finishes the job."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.embedder import LocalEmbedder
from app.errors import EmbeddingError
from app.repositories.maintenance import MaintenanceRepository, StaleRow
from app.runtime.resources import warn_of_other_models
from app.schemas.conversation import MessageCreate
from app.services.conversation import ConversationService
from app.services.embedding import EmbeddingService
from app.services.memory import MemoryInput, MemoryService, content_hash
from app.services.reembed import ReembedError, other_models, reembed
from app.services.reindex import reindex_users
from tests.admin.fakes import FakeEmbedder, fake_vector
from tests.helpers import as_stored

Sessions = async_sessionmaker[AsyncSession]
FAKE = FakeEmbedder.model


async def _store_with_local_model(
    sessions: Sessions, embedder: LocalEmbedder, users: list[str]
) -> None:
    """30 memories and 10 messages per user, embedded by the real local model."""
    embeddings = EmbeddingService(embedder)
    async with sessions() as session, session.begin():
        memories = MemoryService(session, embeddings)
        conversations = ConversationService(session, embeddings)
        for user in users:
            await memories.create_many(
                [
                    MemoryInput(user_id=user, content=f"{user} remembers fact {i}", type="fact")
                    for i in range(30)
                ]
            )
            conversation = await conversations.create(user, None)
            await conversations.append(
                user,
                conversation.id,
                [
                    MessageCreate(
                        role="user",
                        content=f"{user} says line {i}"
                        + (
                            ". And then two sentences more, long enough to be passages."
                            " Or three, which makes twenty words."
                            if i == 0
                            else ""
                        ),
                    )
                    for i in range(10)
                ],
                uuid.uuid4(),
            )


async def _models(sessions: Sessions) -> dict[tuple[str, str | None], int]:
    async with sessions() as s:
        out: dict[tuple[str, str | None], int] = {}
        for table in ("memory_items", "messages", "message_passages"):
            for model, n in await s.execute(
                text(f"SELECT embedding_model, count(*) FROM {table} GROUP BY 1")
            ):
                out[(table, model)] = int(n)
        return out


class _Narrow:
    model, dimension = "narrow-8", 8

    async def embed(self, texts: Any) -> Any:
        raise AssertionError("must not be called")


async def test_interrupted_reembed_resumes_and_finishes(
    private_sessions: Sessions, embedder: LocalEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    users = [f"user-{uuid.uuid4()}" for _ in range(2)]
    await _store_with_local_model(private_sessions, embedder, users)
    local = embedder.model
    assert await _models(private_sessions) == {
        ("message_passages", local): 6,
        ("memory_items", local): 60,
        ("messages", local): 20,
    }

    # The start-up's check: nothing to say on the store's own model, the tables on another.
    assert await other_models(private_sessions, local) == {}
    assert await other_models(private_sessions, FAKE) == {
        "memory_items": {local},
        "messages": {local},
    }

    # The check's own logger only: with the root logger at INFO (as the CLI configures it), the
    # audit log's INFO lines of the admin reads above are captured too.
    def said() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "app.runtime.resources"]

    with caplog.at_level(logging.WARNING, logger="app.runtime.resources"):
        await warn_of_other_models(private_sessions, local)
        assert not said()
        await warn_of_other_models(private_sessions, FAKE)
    (warning,) = said()
    assert f"memory_items: {local}; messages: {local}" in warning.getMessage()
    assert "pgrecall reembed" in warning.getMessage()

    counted = await reembed(private_sessions, EmbeddingService(FakeEmbedder()), dry_run=True)
    assert (counted.pending("memory_items"), counted.pending("messages")) == (60, 20)
    assert await _models(private_sessions) == {
        ("message_passages", local): 6,
        ("memory_items", local): 60,
        ("messages", local): 20,
    }

    # The embedder dies on its third batch: two batches of 16 are committed, nothing else moved.
    with pytest.raises(EmbeddingError):
        await reembed(
            private_sessions, EmbeddingService(FakeEmbedder(fail_after_calls=2)), batch_size=16
        )
    assert await _models(private_sessions) == {
        ("memory_items", FAKE): 32,
        ("memory_items", local): 28,
        ("messages", local): 20,
        ("message_passages", local): 6,
    }

    # Both users have their own vector indexes (as big users would): the re-embed retrains them.
    async with private_sessions() as session, session.begin():
        for table in ("memory_items", "messages"):
            await reindex_users(session, table, more_than=0)
    finished = await reembed(private_sessions, EmbeddingService(FakeEmbedder()), batch_size=16)
    assert [(r.table, r.users, r.built, r.dropped) for r in finished.user_indexes] == [
        ("memory_items", 2, 2, 0),
        ("messages", 2, 2, 0),
    ]
    assert finished.moved == {"memory_items": 28, "messages": 20}
    # The moved messages' passages are made again by the new model (3 per user).
    assert await _models(private_sessions) == {
        ("memory_items", FAKE): 60,
        ("messages", FAKE): 20,
        ("message_passages", FAKE): 6,
    }
    assert finished.passages == 6
    assert sorted(r.table for r in finished.reindexed) == ["memory_items", "messages"]
    async with private_sessions() as s:
        rows = (
            await s.execute(
                text(
                    "SELECT content, embedding::text AS vec FROM memory_items UNION ALL "
                    "SELECT content, embedding::text FROM messages"
                )
            )
        ).all()
    assert len(rows) == 80
    for row in rows:
        np.testing.assert_array_equal(
            np.array(json.loads(row.vec), dtype=np.float32), as_stored(fake_vector(row.content))
        )

    assert await other_models(private_sessions, FAKE) == {}
    nothing = await reembed(private_sessions, EmbeddingService(FakeEmbedder()))
    assert nothing.moved == {"memory_items": 0, "messages": 0} and nothing.reindexed == []


async def test_reembed_refuses_another_dimension(private_sessions: Sessions) -> None:
    with pytest.raises(ReembedError, match="384 dimensions but narrow-8 makes 8"):
        await reembed(private_sessions, EmbeddingService(_Narrow()))  # type: ignore[arg-type]


async def test_a_memory_edited_meanwhile_is_left_for_the_next_run(
    private_sessions: Sessions,
) -> None:
    user = f"user-{uuid.uuid4()}"
    async with private_sessions() as session, session.begin():
        (item_id,) = await MemoryService(session, EmbeddingService(FakeEmbedder())).create_many(
            [MemoryInput(user_id=user, content="original text", type="note")]
        )
    stale = StaleRow(item_id, "original text", content_hash("text read before an edit"))
    async with private_sessions() as session, session.begin():
        repo = MaintenanceRepository(session)
        assert (
            await repo.write_embeddings("memory_items", "other-model", [stale], [fake_vector("x")])
            == 0
        )
        fresh = StaleRow(item_id, "original text", content_hash("original text"))
        assert (
            await repo.write_embeddings("memory_items", "other-model", [fresh], [fake_vector("x")])
            == 1
        )
