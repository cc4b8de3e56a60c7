"""The optional re-ranking stages (off in the default preset) on the real database: the PRF SQL
round is scoped by user and finds items through the seeds' rare lexemes; all stages on at once
still answer, keep the best item first and respect the filters."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from app.db import user_session
from app.repositories.retrieval import RetrievalRepository
from app.repositories.search_index import Source
from tests.api.test_query_memory import STORE, contents, query, store

POTTERY = [
    ("I glaze my pottery in the community kiln on Saturdays", "note"),
    ("The kiln at the studio reaches 1200 degrees", "fact"),
    ("My sister collects stamps from Iceland", "fact"),
    ("The quarterly kiln maintenance is booked for March", "note"),
]


async def test_prf_round_scores_items_sharing_the_seeds_rare_lexemes(
    make_client: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    async with make_client() as (_, app):
        ids = await store(app, user_id, POTTERY + STORE[:4])
        foreign = await store(app, other_user_id, [("Our kiln is electric", "fact")])
        sessions = app.state.resources.sessionmaker
        async with user_session(sessions, user_id) as session, session.begin():
            repo = RetrievalRepository(session)
            hits = await repo.keyword(
                user_id,
                "pottery",
                limit=10,
                memories=True,
                messages=True,
                types=None,
                k1=1.2,
                b=0.5,
            )
            seed = max(hits.scores, key=lambda k: hits.scores[k])
            assert str(seed[1]) == ids[0]
            expansion = await repo.expansion(
                user_id,
                "pottery",
                [seed[1]],
                terms=10,
                min_df=2,
                limit=10,
                memories=True,
                messages=True,
                types=None,
                k1=1.2,
                b=0.5,
            )
    found = {str(i) for (source, i) in expansion if source is Source.MEMORY}
    # "kiln" is in the seed and in two other items: the round finds both.
    assert {ids[1], ids[3]} <= found
    assert ids[2] not in found  # shares nothing rare with the seed
    assert foreign[0] not in found  # another user's postings never count


async def test_all_optional_stages_on_still_answer_and_keep_the_best_first(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, app):
        await store(app, user_id, POTTERY + STORE)
        plain = await query(client, user_id, query="Where do I fire my pottery?", min_score=0.0)
        resources = app.state.resources
        preset = resources.query_config.preset.with_(
            name="all-stages",
            prf_docs=3,
            session_vote_weight=0.5,
            conversation_cap=1,
            relevance_weight=0.3,
            cutoff_exempt_ranks=2,
        )
        resources.query_config = dataclasses.replace(resources.query_config, preset=preset)
        staged = await query(client, user_id, query="Where do I fire my pottery?", min_score=0.0)
        assert contents(staged)[0] == contents(plain)[0]
        assert set(contents(staged)) <= {c for c, _ in POTTERY + STORE}
        filtered = await query(
            client, user_id, query="kiln", time_to="2000-01-01T00:00:00Z", min_score=0.0
        )
        assert filtered["items"] == []
