"""Exact or ANN search: the threshold counts what the exact statement would score, the user's
items and (when passages score messages) their passages (app/services/query/pipeline.py arms).
A user of few turns and many passages takes the ANN path, where the passages only re-score
the messages found; on a small store both paths return the same items."""

from __future__ import annotations

from typing import Any

import pytest

from app.db import user_session
from app.repositories.retrieval import RetrievalRepository, SearchSize
from tests.helpers import add_messages, headers

# Four sentences of at least three words, 20+ words: four passages (app/retrieval/passages.py).
LONG_TURN = (
    "We moved to Lisbon in May this year. The kids started at the new school right away. "
    "My wife found a job at the harbour office. Our greyhound Pixel loves the long beach walks."
)
SHORT_TURN = "Pixel is a greyhound"


@pytest.mark.parametrize(("threshold", "exact"), [(5, False), (6, True), (1_000, True)])
async def test_passages_count_towards_the_exact_threshold(
    make_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    user_id: str,
    threshold: int,
    exact: bool,
) -> None:
    sizes: list[SearchSize] = []
    paths: list[bool] = []
    search_size, vector = RetrievalRepository.search_size, RetrievalRepository.vector

    async def recorded_size(self: RetrievalRepository, *a: Any, **kw: Any) -> SearchSize:
        sizes.append(await search_size(self, *a, **kw))
        return sizes[-1]

    async def recorded_vector(self: RetrievalRepository, *a: Any, **kw: Any) -> Any:
        paths.append(kw["exact"])
        return await vector(self, *a, **kw)

    monkeypatch.setattr(RetrievalRepository, "search_size", recorded_size)
    monkeypatch.setattr(RetrievalRepository, "vector", recorded_vector)
    async with make_client(exact_search_max_items=threshold) as (client, _):
        await add_messages(client, user_id, [LONG_TURN, SHORT_TURN])
        response = await client.post(
            "/v1/memory/query",
            json={"query": "Where does the family live now?", "min_score": 0.0},
            headers=headers(user_id),
        )
    assert response.status_code == 200, response.text
    # Two items and four passages; passages counted up to the threshold + 1 only.
    assert sizes == [SearchSize(2, min(4, threshold + 1))]
    assert paths == [exact]
    assert {i["content"] for i in response.json()["items"]} == {LONG_TURN, SHORT_TURN}


async def test_passages_are_counted_only_up_to_the_cap(make_client: Any, user_id: str) -> None:
    async with make_client() as (client, app):
        await add_messages(client, user_id, [LONG_TURN, LONG_TURN + " Again.", SHORT_TURN])
        async with (
            user_session(app.state.resources.sessionmaker, user_id) as session,
            session.begin(),
        ):
            repo = RetrievalRepository(session)
            assert await repo.search_size(user_id, passages_up_to=100) == SearchSize(3, 8)
            assert await repo.search_size(user_id, passages_up_to=5) == SearchSize(3, 5)
            assert await repo.search_size(user_id, passages_up_to=0) == SearchSize(3, 0)
            assert await repo.search_size("someone-else", passages_up_to=100) == SearchSize(0, 0)
