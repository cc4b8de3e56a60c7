"""fetch_around (one round trip on the query path): the seeds' neighbours in their own
conversations, and what `fetch` returns for the keys and those neighbours."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from app.db import user_session
from app.repositories.retrieval import RetrievalRepository, Source, TimeFilter
from tests.helpers import add_messages, headers


async def test_fetch_around_gives_neighbours_and_fetches_them(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, app):
        turns = [f"turn {i} about the harbour {uuid.uuid4()}" for i in range(8)]
        items = await add_messages(client, user_id, turns)
        other = await add_messages(client, user_id, ["another conversation entirely"])
        ids = [uuid.UUID(i["id"]) for i in items]
        keys = [(Source.MESSAGE, ids[0]), (Source.MESSAGE, ids[5]), (Source.MESSAGE, ids[7])]
        seeds = [ids[3], ids[7], uuid.UUID(other[0]["id"])]  # a conversation's last turn too
        async with (
            user_session(app.state.resources.sessionmaker, user_id) as session,
            session.begin(),
        ):
            repo = RetrievalRepository(session)
            for when in (TimeFilter(), TimeFilter(as_of=datetime.now(UTC) - timedelta(days=1))):
                around, fetched, vectors = await repo.fetch_around(user_id, keys, seeds, when)
                assert vectors == {}  # none asked for
                assert around == {
                    ids[3]: (ids[2], ids[4]),
                    ids[7]: (ids[6], None),  # a conversation's last turn
                    seeds[2]: (None, None),  # alone in its conversation
                }
                wanted = keys + [(Source.MESSAGE, n) for pair in around.values() for n in pair if n]
                assert fetched == await repo.fetch(user_id, wanted, when)
                assert len(fetched) == (0 if when else 6)  # 0, 2, 4, 5, 6, 7
        # Another user's session sees nothing of it.
        async with (
            user_session(app.state.resources.sessionmaker, f"{user_id}-x") as session,
            session.begin(),
        ):
            repo = RetrievalRepository(session)
            assert await repo.fetch_around(f"{user_id}-x", keys, seeds) == ({}, {}, {})


async def test_fetch_around_reads_the_asked_vectors_with_the_memories_rows(
    make_client: Callable[..., Any], user_id: str
) -> None:
    """The topic links' vectors come in the memories' statement: exactly those asked for, as
    `vectors` reads them, and none of another user's."""
    async with make_client() as (client, app):
        ids = []
        texts = ("Staying on insulin pens for now", "Switched to an insulin pump", "Owns a cat")
        for text in texts:
            response = await client.post(
                "/v1/tools/save_memory",
                json={"content": text, "type": "decision"},
                headers=headers(user_id),
            )
            assert response.status_code == 200, response.text
            ids.append(uuid.UUID(response.json()["memory"]["id"]))
        keys = [(Source.MEMORY, i) for i in ids]
        for user in (user_id, f"{user_id}-x"):
            async with (
                user_session(app.state.resources.sessionmaker, user) as session,
                session.begin(),
            ):
                repo = RetrievalRepository(session)
                _, fetched, vectors = await repo.fetch_around(user, keys, [], vectors=ids[:2])
                if user != user_id:
                    assert (fetched, vectors) == ({}, {})
                    continue
                assert set(fetched) == set(keys)
                assert set(vectors) == set(keys[:2])
                expected = await repo.vectors(user, keys[:2])
                for key in keys[:2]:
                    assert vectors[key].dtype == np.float32
                    np.testing.assert_array_equal(vectors[key], expected[key])
