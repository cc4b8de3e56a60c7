"""Rebuilding keyword postings: the same index the write paths make, one user at a time, and
what an upgrade adds (a speaker's name) reaches turns written before it."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.embedder import LocalEmbedder
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.schemas.conversation import MessageCreate
from app.services.conversation import ConversationService
from app.services.embedding import EmbeddingService
from app.services.keywords import all_users, rebuild_keywords
from app.services.memory import MemoryInput, MemoryService

Sessions = async_sessionmaker[AsyncSession]


async def _store(sessions: Sessions, embedder: LocalEmbedder, user: str) -> None:
    embeddings = EmbeddingService(embedder)
    async with sessions() as session, session.begin():
        await MemoryService(session, embeddings).create_many(
            [MemoryInput(user_id=user, content=f"{user} keeps bees on the roof", type="fact")]
        )
        conversations = ConversationService(session, embeddings)
        for turns in (
            [("user", "I took up the violin last spring", "Tim"), ("user", "Nice!", "John")],
            [("user", "The bees swarmed twice this May", None)],
        ):
            conversation = await conversations.create(user, None)
            await conversations.append(
                user,
                conversation.id,
                [
                    MessageCreate(
                        role=role, content=body, metadata={"speaker": name} if name else {}
                    )
                    for role, body, name in turns
                ],
                uuid.uuid4(),
            )


async def _index_of(sessions: Sessions, user: str) -> tuple[list[Any], Any]:
    async with sessions() as session:
        postings = await session.execute(
            text(
                "SELECT lexeme, item_id, source, tf, dl FROM search_postings "
                "WHERE user_id = :u ORDER BY item_id, lexeme"
            ),
            {"u": user},
        )
        stats = await session.execute(
            text("SELECT doc_count, total_length FROM search_stats WHERE user_id = :u"),
            {"u": user},
        )
        return [tuple(r) for r in postings], stats.one_or_none()


async def test_a_rebuild_makes_the_index_the_write_paths_made(
    private_sessions: Sessions, embedder: LocalEmbedder
) -> None:
    user, other = f"user-{uuid.uuid4()}", f"user-{uuid.uuid4()}"
    for u in (user, other):
        await _store(private_sessions, embedder, u)
    written, others = (
        await _index_of(private_sessions, user),
        await _index_of(private_sessions, other),
    )
    assert written[0] and written[1] is not None
    async with private_sessions() as session, session.begin():
        await SearchIndexRepository(session).clear(user)  # lost, or built by an older version
    assert (await _index_of(private_sessions, user)) == ([], None)

    report = await rebuild_keywords(private_sessions, [user])

    assert report.users == 1 and report.per_user == {user: 4}  # 1 memory + 3 turns
    assert await _index_of(private_sessions, user) == written
    assert await _index_of(private_sessions, other) == others  # untouched
    again = await rebuild_keywords(private_sessions)  # every user, idempotent
    assert {user, other} <= set(again.per_user)
    assert await _index_of(private_sessions, user) == written
    assert {user, other} <= set(await all_users(private_sessions))


async def test_a_speaker_written_before_the_upgrade_is_indexed_after_a_rebuild(
    private_sessions: Sessions, embedder: LocalEmbedder
) -> None:
    user = f"user-{uuid.uuid4()}"
    await _store(private_sessions, embedder, user)
    async with private_sessions() as session, session.begin():
        index = SearchIndexRepository(session)
        memories, messages = await index.sources(user)
        await index.clear(user)
        await index.index(  # documents as made before speakers were indexed
            user,
            [Document(m.id, Source.MEMORY, m.content) for m in memories]
            + [Document(m.id, Source.MESSAGE, m.content) for m in messages],
        )
    lexemes = {p[0] for p in (await _index_of(private_sessions, user))[0]}
    assert "tim" not in lexemes

    await rebuild_keywords(private_sessions, [user])

    postings, _ = await _index_of(private_sessions, user)
    assert {p[0] for p in postings if p[0] in ("tim", "john")} == {"tim", "john"}


def test_the_command_rebuilds_every_user(run: Any) -> None:
    done = run("rebuild-keywords", "--quiet")
    assert done.returncode == 0, done.stderr
    assert "rebuilt keyword postings of" in done.stdout
    refused = run("rebuild-keywords", "--user", "bad user id")
    assert refused.returncode == 2
