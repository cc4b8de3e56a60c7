"""Rebuilding passages: messages written before migration 0009_passages (or embedded by
another model) get the passages the write path would have made, and nothing is made twice."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.embedder import LocalEmbedder
from app.schemas.conversation import MessageCreate
from app.services.conversation import ConversationService
from app.services.embedding import EmbeddingService
from app.services.passages import rebuild_passages

Sessions = async_sessionmaker[AsyncSession]

TURNS = [
    (
        "I took up the violin last spring, after years of only listening to it. "
        "My teacher says I practise too little, and she is right about that.",
        "Tim",
    ),
    ("Nice!", "John"),
    (
        "John: We adopted a dog from the shelter in May, a shy little terrier. "
        "She sleeps on the sofa all day and barks at the mailman.",
        "John",
    ),
]


async def _store(sessions: Sessions, embedder: LocalEmbedder, user: str) -> None:
    embeddings = EmbeddingService(embedder)
    async with sessions() as session, session.begin():
        conversations = ConversationService(session, embeddings)
        conversation = await conversations.create(user, None)
        await conversations.append(
            user,
            conversation.id,
            [
                MessageCreate(role="user", content=body, metadata={"speaker": name})
                for body, name in TURNS
            ],
            uuid.uuid4(),
        )


async def _passages(sessions: Sessions, user: str) -> list[tuple[Any, ...]]:
    async with sessions() as session:
        rows = await session.execute(
            text(
                "SELECT message_id, ord, embedding::text, embedding_model FROM message_passages "
                "WHERE user_id = :u ORDER BY message_id, ord"
            ),
            {"u": user},
        )
        return [tuple(r) for r in rows]


async def test_a_rebuild_makes_the_passages_the_write_path_made(
    private_sessions: Sessions, embedder: LocalEmbedder
) -> None:
    user, other = f"user-{uuid.uuid4()}", f"user-{uuid.uuid4()}"
    for u in (user, other):
        await _store(private_sessions, embedder, u)
    written, others = (
        await _passages(private_sessions, user),
        await _passages(private_sessions, other),
    )
    assert len(written) == 4  # two sentences in each of two turns; "Nice!" has none
    async with private_sessions() as session, session.begin():
        await session.execute(
            text("DELETE FROM message_passages WHERE user_id = :u AND ord = 0"), {"u": user}
        )
        # ... and one turn's passages are of a model the service no longer uses.
        await session.execute(
            text("UPDATE message_passages SET embedding_model = 'old' WHERE user_id = :u"),
            {"u": user},
        )

    report = await rebuild_passages(private_sessions, EmbeddingService(embedder), [user])

    assert (report.users, report.messages, report.passages, report.dropped) == (1, 3, 4, 2)
    rows = await _passages(private_sessions, user)
    assert [r[:2] for r in rows] == [r[:2] for r in written]
    for now, then in zip(rows, written, strict=True):  # same texts, same model: same vectors
        assert now[2:] == then[2:] or _close(now[2], then[2])
    assert await _passages(private_sessions, other) == others  # untouched
    again = await rebuild_passages(private_sessions, EmbeddingService(embedder), [user])
    assert (again.messages, again.passages, again.dropped) == (1, 0, 0)  # only "Nice!" is read


def _close(a: str, b: str) -> bool:
    x = [float(v) for v in a.strip("[]").split(",")]
    y = [float(v) for v in b.strip("[]").split(",")]
    return max(abs(p - q) for p, q in zip(x, y, strict=True)) < 1e-5


def test_the_command_rebuilds_every_user(run: Any) -> None:
    done = run("rebuild-passages", "--quiet")
    assert done.returncode == 0, done.stderr
    assert "passages of" in done.stdout and "passages written" in done.stdout
    refused = run("rebuild-passages", "--user", "bad user id")
    assert refused.returncode == 2
