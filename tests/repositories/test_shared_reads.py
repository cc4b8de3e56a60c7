"""The shared spaces' statements (app/repositories/retrieval/shared.py): one statement for every
space a query reads gives each space what its own statement gives, with its own statistics and
limit; one statement per space (`split`, as on Citus) gives the same; and row-level security
still decides which spaces the signed user reads."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.adapters.embedder import LocalEmbedder
from app.db import read_transaction
from app.domain import MemoryScope, space_owner
from app.embedded import EmbeddedPostgres
from app.main import create_app
from app.repositories.retrieval import RetrievalRepository, Source
from tests.helpers import shared_space
from tests.redis_server import RedisServer
from tests.servers import app_settings

ADMIN = {"Authorization": "Bearer admin-key"}
SPACES = {
    "garden": [
        "The garden hose is kept in the blue shed behind the old barn",
        "Tomatoes in the garden are watered every evening",
        "The garden gate sticks when it rains",
    ],
    "kitchen": [
        "The kitchen kettle is descaled monthly",
        "Spare garden gloves are in the kitchen drawer",
    ],
}
KEYWORD = {"memories": True, "messages": False, "types": None, "k1": 1.2, "b": 0.75}
# The garden's memories hold "garden" once each, in texts of different lengths: their BM25
# scores differ, so which two make a limit of two does not depend on the order of the rows.


@dataclass
class Shared:
    engine: AsyncEngine
    user: str
    stranger: str
    owners: list[str]


@pytest.fixture
async def shared(
    pg: EmbeddedPostgres, redis_srv: RedisServer, embedder: LocalEmbedder
) -> AsyncIterator[Shared]:
    settings = app_settings(
        pg, redis_srv.url, write_rate_limit_per_minute=0, api_key="k", admin_api_key="admin-key"
    )
    app = create_app(settings, embedder=embedder)
    run = uuid.uuid4().hex[:8]
    user, stranger = f"mia-{run}", f"ned-{run}"
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            owners = []
            for name, texts in SPACES.items():
                space = f"{name}-{run}"
                owners.append(space_owner(space))
                await shared_space(
                    client, space, {user: "write"}, writer=user, content=texts,
                    admin=ADMIN, member={"Authorization": "Bearer k"},
                )  # fmt: skip
            yield Shared(app.state.resources.engine, user, stranger, owners)


@pytest.mark.parametrize("split", [False, True])
async def test_one_statement_gives_each_space_its_own_statement(
    shared: Shared, embedder: LocalEmbedder, split: bool
) -> None:
    (vector,) = await embedder.embed(["where are the garden gloves"])
    async with read_transaction(shared.engine, MemoryScope(shared.user)) as reads:
        repo = RetrievalRepository(reads)
        both = await repo.keyword_each(
            shared.owners, "garden gloves", limit=2, split=split, **KEYWORD
        )
        cosines = await repo.vector_each(
            shared.owners, vector, exact=[True, True], limit=2, model=embedder.model, split=split
        )
        for n, owner in enumerate(shared.owners):
            alone = await repo.keyword(owner, "garden gloves", limit=2, **KEYWORD)
            assert both[n] == alone  # its own statistics (max_score) and limit
            assert both[n].scores and len(both[n].scores) <= 2
            assert cosines[n] == await repo.vector(
                owner, vector, limit=2, memories=True, messages=False, types=None,
                exact=True, model=embedder.model,
            )  # fmt: skip
        # the kitchen's own corpus: its gloves memory is its best keyword match
        kitchen = await repo.fetch(shared.owners[1], list(both[1].scores))
        assert (
            "gloves"
            in max(kitchen.values(), key=lambda c: both[1].scores[(Source.MEMORY, c.id)]).content
        )
        ids = [[i for _, i in both[n].scores] for n in range(2)]
        rows = await repo.rows_each(shared.owners, ids, ids[0], split=split)
        assert set(rows.candidates) == {k for hits in both for k in hits.scores}
        assert set(rows.vectors) == {(Source.MEMORY, i) for i in ids[0]}
        expected = {}
        for n, owner in enumerate(shared.owners):
            expected |= await repo.fetch(owner, list(both[n].scores))
        assert rows.candidates == expected
        assert await repo.sizes(shared.owners, split=split) == [3, 2]


async def test_a_user_without_a_grant_reads_no_space(shared: Shared) -> None:
    async with read_transaction(shared.engine, MemoryScope(shared.stranger)) as reads:
        repo = RetrievalRepository(reads)
        hits = await repo.keyword_each(shared.owners, "garden gloves", limit=5, **KEYWORD)
        assert [h.scores for h in hits] == [{}, {}]
        assert await repo.sizes(shared.owners) == [0, 0]
