"""Passages (migration 0009_passages): written with their messages on the write path, and
scored by the vector statement on both the exact and the ANN path."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from sqlalchemy import text

from app.db import user_session
from app.repositories.retrieval import RetrievalRepository, Source, vector_search_settings
from app.retrieval.passages import passages
from app.services.embedding import Priority
from tests.helpers import add_messages

LONG = (
    "We finally moved to Lisbon in May after months of paperwork. "
    "The kids love their new school and already speak some Portuguese. "
    "My sister visited us last weekend."
)
SHORT = "Thanks, that sounds lovely!"


async def _passage_rows(app: Any, user_id: str) -> list[Any]:
    async with user_session(app.state.resources.sessionmaker, user_id) as session:
        return list(
            (
                await session.execute(
                    text(
                        "SELECT message_id, ord, embedding_model FROM message_passages "
                        "WHERE user_id = :u ORDER BY message_id, ord"
                    ),
                    {"u": user_id},
                )
            ).all()
        )


async def test_append_stores_a_passage_per_sentence_of_long_turns_only(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, app):
        long, _ = await add_messages(client, user_id, [LONG, SHORT])
        rows = await _passage_rows(app, user_id)
        assert [(str(r.message_id), r.ord) for r in rows] == [(long["id"], i) for i in range(3)]
        assert {r.embedding_model for r in rows} == {app.state.resources.embeddings.model}
        # Another user sees none of them; deleting the conversation's messages deletes them.
        assert await _passage_rows(app, f"{user_id}-x") == []
        response = await client.delete(
            f"/v1/conversations/{long['conversation_id']}/messages",
            headers={"X-User-ID": user_id},
        )
        assert response.status_code in (200, 204), response.text
        assert await _passage_rows(app, user_id) == []
    assert len(passages(LONG)) == 3 and passages(SHORT) == []


async def _scores(
    app: Any, user_id: str, question: str, *, exact: bool, weight: float
) -> dict[uuid.UUID, float]:
    embeddings = app.state.resources.embeddings
    vector = (await embeddings.embed([question], priority=Priority.INTERACTIVE))[0]
    async with (
        user_session(app.state.resources.sessionmaker, user_id) as session,
        session.begin(),
    ):
        repo = RetrievalRepository(session)
        await repo.set_vector_search(vector_search_settings(exact=exact, probes=10, max_probes=100))
        found = await repo.vector(
            user_id,
            vector,
            limit=10,
            memories=False,
            messages=True,
            types=None,
            exact=exact,
            model=embeddings.model,
            passage_weight=weight,
        )
    assert all(source is Source.MESSAGE for source, _ in found)
    return {i: s for (_, i), s in found.items()}


async def test_a_turn_scores_its_best_sentence_mixed_with_itself(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, app):
        long, short = await add_messages(client, user_id, [LONG, SHORT])
        ids = uuid.UUID(long["id"]), uuid.UUID(short["id"])
        embeddings = app.state.resources.embeddings
        question = "How are the children doing at school?"
        q = (await embeddings.embed([question], priority=Priority.INTERACTIVE))[0]
        whole = await embeddings.embed([LONG, SHORT], priority=Priority.INTERACTIVE)
        sentences = await embeddings.embed(
            passages(LONG), priority=Priority.INTERACTIVE, cached=False
        )
        best = float(np.max(sentences @ q))
        own = [float(v @ q) for v in whole]
        assert best > own[0]  # the sentence about the kids says it better than the whole turn
        for exact in (True, False):
            plain = await _scores(app, user_id, question, exact=exact, weight=0.0)
            mixed = await _scores(app, user_id, question, exact=exact, weight=0.7)
            assert abs(plain[ids[0]] - own[0]) < 1e-4
            assert abs(mixed[ids[0]] - (0.3 * own[0] + 0.7 * best)) < 1e-4
            # A turn of one sentence has no passage: its score is its own at any weight.
            assert abs(mixed[ids[1]] - own[1]) < 1e-4 and abs(plain[ids[1]] - own[1]) < 1e-4


async def test_passages_off_stores_none_and_the_query_uses_the_turns_own_vector(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client(message_passages=False) as (client, app):
        long, _ = await add_messages(client, user_id, [LONG, SHORT])
        assert await _passage_rows(app, user_id) == []
        question = "How are the children doing at school?"
        plain = await _scores(app, user_id, question, exact=True, weight=0.0)
        mixed = await _scores(app, user_id, question, exact=True, weight=0.7)
        assert plain == mixed and uuid.UUID(long["id"]) in plain


async def test_the_exact_statement_never_pairs_messages_with_passages(
    make_client: Callable[..., Any], user_id: str
) -> None:
    """Right after an import there are no statistics for the user, and a join of messages with
    their passages was planned as a nested loop (every message x every passage: 50 ms instead
    of 2 for a LoCoMo user). The statement has no join to plan that way."""
    from app.repositories.retrieval import passage_messages_sql
    from app.vectors import query_vector

    async with make_client() as (client, app):
        await add_messages(client, user_id, [LONG, SHORT] * 20)
        embeddings = app.state.resources.embeddings
        q = (await embeddings.embed(["the kids"], priority=Priority.INTERACTIVE))[0]
        params = {"q": query_vector(q), "user_id": user_id, "model": embeddings.model}
        async with user_session(app.state.resources.sessionmaker, user_id) as session:
            plan = "\n".join(
                (
                    await session.execute(
                        text("EXPLAIN " + passage_messages_sql(True, "")),
                        {**params, "w": 0.7, "limit": 10},
                    )
                ).scalars()
            )
    assert "Join" not in plan and "Nested Loop" not in plan, plan
