"""Exact search and passages (app/services/query/arms.py): a user whose items fit
under the exact threshold is searched exactly; when its items and passages do not fit, its
passages re-score the messages found instead of all being scored. On a small store both
statements return the same items."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from app.db import user_session
from app.repositories.retrieval import RetrievalRepository, SearchSize
from app.services.embedding import Priority
from tests.helpers import add_messages, headers

# Four sentences of at least three words, 20+ words: four passages (app/retrieval/passages.py).
LONG_TURN = (
    "We moved to Lisbon in May this year. The kids started at the new school right away. "
    "My wife found a job at the harbour office. Our greyhound Pixel loves the long beach walks."
)
SHORT_TURN = "Pixel is a greyhound"


def settings_at_vector(monkeypatch: pytest.MonkeyPatch, *names: str) -> list[tuple[str, ...]]:
    """Records, at each vector statement, the values its transaction has for `names`."""
    seen: list[tuple[str, ...]] = []
    vector = RetrievalRepository.vector
    current = "SELECT " + ", ".join(
        f"current_setting('{name}') AS s{i}" for i, name in enumerate(names)
    )

    async def recorded(self: RetrievalRepository, *a: Any, **kw: Any) -> Any:
        (row,) = await self._rows(current, {})
        seen.append(tuple(row[f"s{i}"] for i in range(len(names))))
        return await vector(self, *a, **kw)

    monkeypatch.setattr(RetrievalRepository, "vector", recorded)
    return seen


async def ask(client: Any, user_id: str, question: str) -> set[str]:
    """The contents /v1/memory/query returns for `question` (no floor)."""
    response = await client.post(
        "/v1/memory/query", json={"query": question, "min_score": 0.0}, headers=headers(user_id)
    )
    assert response.status_code == 200, response.text
    return {i["content"] for i in response.json()["items"]}


@pytest.mark.parametrize(
    ("threshold", "size", "exact", "rescore"),
    [
        (1, SearchSize(2, 0), False, True),  # above by items alone: ANN, no passage counted
        (5, SearchSize(2, 4), True, True),  # 2 + 4 > 5: exact messages, passages re-score
        (6, SearchSize(2, 4), True, False),  # 2 + 4 <= 6: every passage scored
        (1_000, SearchSize(2, 0), True, False),  # items under a quarter of it: none counted
    ],
)
async def test_passages_decide_how_the_exact_path_scores_them(
    make_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    user_id: str,
    threshold: int,
    size: SearchSize,
    exact: bool,
    rescore: bool,
) -> None:
    sizes: list[SearchSize] = []
    paths: list[tuple[bool, bool, str]] = []
    search_size, vector = RetrievalRepository.search_size, RetrievalRepository.vector

    async def recorded_size(self: RetrievalRepository, *a: Any, **kw: Any) -> SearchSize:
        sizes.append(await search_size(self, *a, **kw))
        return sizes[-1]

    async def recorded_vector(self: RetrievalRepository, *a: Any, **kw: Any) -> Any:
        (row,) = await self._rows("SELECT current_setting('enable_seqscan') AS v", {})
        seqscan = row["v"]
        paths.append((kw["exact"], kw.get("rescore_passages", False), seqscan))
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
    assert [(s.items, s.passages) for s in sizes] == [(size.items, size.passages)]
    # Re-scoring reads the user's messages through the user_id index (set_vector_search).
    assert paths == [(exact, rescore and exact, "off" if rescore and exact else "on")]
    assert {i["content"] for i in response.json()["items"]} == {LONG_TURN, SHORT_TURN}


async def test_passages_are_counted_only_up_to_the_cap(make_client: Any, user_id: str) -> None:
    async with make_client() as (client, app):
        await add_messages(client, user_id, [LONG_TURN, LONG_TURN + " Again.", SHORT_TURN])
        async with (
            user_session(app.state.resources.sessionmaker, user_id) as session,
            session.begin(),
        ):
            repo = RetrievalRepository(session)
            # Three items and eight passages, counted until items + passages reach up_to.
            assert await repo.search_size(user_id, up_to=11) == SearchSize(3, 8)
            assert await repo.search_size(user_id, up_to=8) == SearchSize(3, 5)
            assert await repo.search_size(user_id, up_to=2) == SearchSize(3, 0)
            assert await repo.search_size(user_id, up_to=0) == SearchSize(3, 0)
            # Items at most a quarter of up_to: the passages are not read.
            assert await repo.search_size(user_id, up_to=12) == SearchSize(3, 0)
            assert await repo.search_size(user_id, up_to=100) == SearchSize(3, 0)
            assert await repo.search_size("someone-else", up_to=11) == SearchSize(0, 0)


@pytest.mark.parametrize(
    ("generic_max", "mode"),
    [(3, "force_generic_plan"), (2, "force_custom_plan"), (0, "force_custom_plan")],
)
async def test_search_size_picks_the_plans_of_the_transaction(
    make_client: Any, user_id: str, generic_max: int, mode: str, generic_plan: str
) -> None:
    """A user of at most `generic_max` items runs the rest of the transaction on generic plans;
    the setting ends with the transaction (the next one plans per query again)."""
    mode = generic_plan if mode == "force_generic_plan" else mode  # custom on Citus
    async with make_client() as (client, app):
        await add_messages(client, user_id, [LONG_TURN, SHORT_TURN, "The harbour is busy"])
        sessionmaker = app.state.resources.sessionmaker
        setting = text("SELECT current_setting('plan_cache_mode')")
        async with (
            user_session(sessionmaker, user_id, custom_plans=True) as session,
            session.begin(),
        ):
            assert await session.scalar(setting) == "force_custom_plan"
            size = await RetrievalRepository(session).search_size(
                user_id, up_to=0, generic_max=generic_max
            )
            assert size.items == 3
            assert size.generic_plans is (mode == "force_generic_plan")
            assert await session.scalar(setting) == mode
        async with (
            user_session(sessionmaker, user_id, custom_plans=True) as session,
            session.begin(),
        ):
            assert await session.scalar(setting) == "force_custom_plan"


@pytest.mark.parametrize(
    ("generic_max", "mode"), [(1_000, "force_generic_plan"), (0, "force_custom_plan")]
)
async def test_the_query_of_a_small_user_runs_on_generic_plans(
    make_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    user_id: str,
    generic_max: int,
    mode: str,
    generic_plan: str,
) -> None:
    """Through the service: the vector statement of a 2-item user runs under the plan mode
    search_size chose, and the answer is the same either way."""
    mode = generic_plan if mode == "force_generic_plan" else mode  # custom on Citus
    seen = settings_at_vector(monkeypatch, "plan_cache_mode")
    async with make_client(generic_plan_max_items=generic_max) as (client, _):
        await add_messages(client, user_id, [LONG_TURN, SHORT_TURN])
        answer = await ask(client, user_id, "Where does the family live now?")
    assert seen == [(mode,)]
    assert answer == {LONG_TURN, SHORT_TURN}


async def test_rescored_passages_give_the_same_items_on_a_small_store(
    make_client: Any, user_id: str
) -> None:
    """With `limit` above the user's messages, re-scoring the messages found by their own
    vectors scores every message with its best passage: the same cosines as the full scan."""
    async with make_client() as (client, app):
        await add_messages(client, user_id, [LONG_TURN, SHORT_TURN, "The harbour is busy"])
        embeddings = app.state.resources.embeddings
        question = ["the family moved to Lisbon"]
        vector = (await embeddings.embed(question, priority=Priority.INTERACTIVE))[0]
        async with (
            user_session(app.state.resources.sessionmaker, user_id, custom_plans=True) as session,
            session.begin(),
        ):
            repo = RetrievalRepository(session)
            common: dict[str, Any] = {
                "limit": 10,
                "memories": True,
                "messages": True,
                "types": None,
                "exact": True,
                "model": embeddings.model,
                "passage_weight": 0.7,
            }
            full = await repo.vector(user_id, vector, **common)
            rescored = await repo.vector(user_id, vector, rescore_passages=True, **common)
    assert len(full) == 3 and list(full) == list(rescored)
    for key, cosine in full.items():
        assert rescored[key] == pytest.approx(cosine, abs=1e-9)


@pytest.mark.parametrize(("ttl_s", "reads"), [(60.0, 1), (0.0, 2)])
async def test_a_users_size_is_read_once_per_ttl(
    make_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    user_id: str,
    ttl_s: float,
    reads: int,
    generic_plan: str,
) -> None:
    """Two questions of one user within PGRECALL_SEARCH_SIZE_TTL_S read its size once; the
    second runs on the plans that size chose (set with the user at the transaction's start),
    and both get the same items as with a fresh read."""
    sizes: list[SearchSize] = []
    search_size = RetrievalRepository.search_size

    async def recorded_size(self: RetrievalRepository, *a: Any, **kw: Any) -> SearchSize:
        sizes.append(await search_size(self, *a, **kw))
        return sizes[-1]

    monkeypatch.setattr(RetrievalRepository, "search_size", recorded_size)
    seen = settings_at_vector(monkeypatch, "plan_cache_mode")
    async with make_client(search_size_ttl_s=ttl_s) as (client, _):
        await add_messages(client, user_id, [LONG_TURN, SHORT_TURN])
        # Two wordings: the second is not served from the answer cache.
        answers = [
            await ask(client, user_id, "Where does the family live now?"),
            await ask(client, user_id, "Where does the family live these days?"),
        ]
    assert len(sizes) == reads
    assert sizes[0].items == 2
    assert sizes[0].generic_plans is (generic_plan == "force_generic_plan")
    assert seen == [(generic_plan,)] * 2
    assert answers == [{LONG_TURN, SHORT_TURN}] * 2


@pytest.mark.parametrize(
    ("threshold", "scans", "probes", "made_by_statement"),
    [
        (5, "off", "1", 1),  # exact, passages re-score: the second query starts with it
        (1, "on", "10", 0),  # ANN: its connection always starts with its settings
        (1_000, "on", "1", 1),  # exact, every passage scored: the first query makes them
    ],
)
async def test_the_vector_statements_settings_come_with_the_user(
    make_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    user_id: str,
    threshold: int,
    scans: str,
    probes: str,
    made_by_statement: int,
) -> None:
    """The vector statement runs under its planner settings whether they were made by their
    own statement (set_vector_search: a size read in this transaction) or with the user at the
    transaction's start (a remembered size; the ANN connection)."""
    statements: list[dict[str, str]] = []
    set_vector_search = RetrievalRepository.set_vector_search

    async def recorded_settings(self: RetrievalRepository, settings: Any) -> None:
        statements.append(dict(settings))
        await set_vector_search(self, settings)

    monkeypatch.setattr(RetrievalRepository, "set_vector_search", recorded_settings)
    seen = settings_at_vector(
        monkeypatch, "enable_seqscan", "enable_bitmapscan", "random_page_cost", "ivfflat.probes"
    )
    async with make_client(exact_search_max_items=threshold, search_size_ttl_s=60.0) as (
        client,
        _,
    ):
        await add_messages(client, user_id, [LONG_TURN, SHORT_TURN])
        await ask(client, user_id, "Where does the family live now?")
        await ask(client, user_id, "Which city is the family in?")
    # Every path prices index pages as in memory (an index-only scan of the covering index on
    # the exact path); the re-scoring exact path considers no table or bitmap scan either.
    assert seen == [(scans, scans, "1.1", probes)] * 2
    assert len(statements) == made_by_statement
