"""The copies of shared spaces (app/services/query/space_cache.py) against the statements they
stand in for: over a space of memories of every type, tag, time, expiry and validity, random
questions and filters get from a copy what the keyword, feedback, vector and row statements
return (up to the order of equal scores); every write of the space moves its version and the
reads that do not write it leave it; and a service with copies answers as one without, sees
a write on its next query and a revoked grant on its next request."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.adapters.embedder import LocalEmbedder
from app.db import read_transaction
from app.domain import MEMORY_TYPES, MemoryScope, space_owner
from app.embedded import EmbeddedPostgres
from app.main import create_app
from app.repositories.retrieval import RetrievalRepository
from app.repositories.retrieval.common import TagFilter, TimeFilter
from app.services.query import space_cache
from app.services.query.space_cache import Scoring, SpaceCache, SpaceCopy, Version
from tests.helpers import shared_space
from tests.redis_server import RedisServer
from tests.servers import app_settings

ADMIN = {"Authorization": "Bearer admin-key"}
MEMBER = {"Authorization": "Bearer k"}
WORDS = [
    *("garden", "hose", "shed", "barn", "tomato", "water", "evening", "gate", "rain"),
    *("kettle", "kitchen", "drawer", "glove", "boat", "harbour", "anchor", "sail"),
    *("engine", "winter", "paint", "ladder", "roof", "chimney", "stove", "recipe", "bread"),
]
TAGS = ("home", "work", "boat")
K1, B = 1.2, 0.75
START = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass
class Space:
    engine: AsyncEngine  # the service role's
    superuser: AsyncEngine
    client: httpx.AsyncClient
    member: str
    stranger: str
    space: str
    owner: str
    ids: list[str]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))


@pytest.fixture
async def space(
    pg: EmbeddedPostgres,
    redis_srv: RedisServer,
    embedder: LocalEmbedder,
    db_engine: AsyncEngine,
) -> AsyncIterator[Space]:
    settings = app_settings(
        pg, redis_srv.url, write_rate_limit_per_minute=0, api_key="k", admin_api_key="admin-key"
    )
    app = create_app(settings, embedder=embedder)
    run = uuid.uuid4().hex[:8]
    member, stranger, name = f"ada-{run}", f"bo-{run}", f"yard-{run}"
    rng = random.Random(43)
    texts = list(dict.fromkeys(sentence(rng) for _ in range(48)))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            ids = await shared_space(
                client, name, {member: "write"}, writer=member, content=texts,
                admin=ADMIN, member=MEMBER,
            )  # fmt: skip
            await scatter(db_engine, ids, rng)
            yield Space(
                app.state.resources.engine, db_engine, client, member, stranger, name,
                space_owner(name), ids,
            )  # fmt: skip


async def scatter(engine: AsyncEngine, ids: list[str], rng: random.Random) -> None:
    """Every memory a random type, tags and creation time; some expired or expiring, some
    superseded at a time, some deleted (as the superuser, past the service's own rules)."""
    async with engine.begin() as conn:
        for i in ids:
            created = START + timedelta(days=rng.randint(0, 300), seconds=rng.randint(0, 86_399))
            ended = rng.random() < 0.2
            values: dict[str, Any] = {
                "id": uuid.UUID(i),
                "type": rng.choice(MEMORY_TYPES),
                "tags": rng.sample(TAGS, rng.randint(0, 3)),
                "created": created,
                "expires": rng.choice([None, None, START, datetime(2100, 1, 1, tzinfo=UTC)]),
                "valid_to": created + timedelta(days=rng.randint(1, 60)) if ended else None,
                "deleted": START if rng.random() < 0.1 else None,
            }
            await conn.execute(
                text(
                    "UPDATE memory_items SET type = :type, tags = :tags, created_at = :created, "
                    "valid_from = :created, expires_at = :expires, valid_to = :valid_to, "
                    "deleted_at = :deleted WHERE id = :id"
                ),
                values,
            )


def filters(rng: random.Random) -> dict[str, Any]:
    """A random choice of the filters a query can set."""
    when = TimeFilter()
    if rng.random() < 0.4:
        low = START + timedelta(days=rng.randint(0, 150))
        high = low + timedelta(days=rng.randint(10, 200)) if rng.random() < 0.7 else None
        as_of = START + timedelta(days=rng.randint(50, 330)) if rng.random() < 0.5 else None
        when = TimeFilter(low if rng.random() < 0.7 else None, high, as_of)
    types = tuple(rng.sample(MEMORY_TYPES, 2)) if rng.random() < 0.3 else None
    tags = None
    if rng.random() < 0.3:
        tags = TagFilter(tuple(rng.sample(TAGS, rng.randint(1, 2))), all_=rng.random() < 0.5)
    return {"when": when, "types": types, "tags": tags}


def close_tops(sql: Mapping[Any, float], copy: Mapping[Any, float], rel: float) -> None:
    """The same top scores; the same items but where equal scores meet the cut."""
    assert sorted(sql.values()) == pytest.approx(sorted(copy.values()), rel=rel, abs=rel)
    if not sql:
        return
    cut = min(sql.values()) + rel
    assert {k for k, v in sql.items() if v > cut} == {k for k, v in copy.items() if v > cut}
    for k in set(sql) & set(copy):
        assert sql[k] == pytest.approx(copy[k], rel=rel, abs=rel)


async def test_a_copy_answers_as_the_statements_do(space: Space, embedder: LocalEmbedder) -> None:
    rng = random.Random(7)
    async with read_transaction(space.engine, MemoryScope(space.member)) as reads:
        repo = RetrievalRepository(reads)
        *_, (row,) = await repo.space_versions([space.owner], "x", "")
        stamp = Version(row["version"], row["doc_count"], row["total_length"])
        items, postings = (
            await repo.space_items(space.owner),
            await repo.space_postings(space.owner),
        )
        copy = SpaceCopy.build(space.owner, stamp, items, postings)
        async with space.superuser.connect() as conn:
            kept = await conn.execute(
                text("SELECT id FROM memory_items WHERE user_id = :o AND deleted_at IS NULL"),
                {"o": space.owner},
            )
            assert set(copy.ids) == set(kept.scalars())  # every memory not deleted, no other
        assert len(copy.ids) < len(space.ids)  # the scattered deletions left some out
        checked = {"keyword": 0, "expansion": 0, "vector": 0}
        for _ in range(40):
            query = " ".join(rng.sample(WORDS, rng.randint(1, 5)))
            named = tuple(rng.sample(query.split(), 1)) if rng.random() < 0.3 else ()
            chosen = filters(rng)
            limit = rng.choice([3, 8, 60])
            lexemes, nq, now, _ = await repo.space_versions([space.owner], query, " ".join(named))
            scoring = Scoring(K1, B, limit, lexemes, frozenset(nq))
            mask = copy.visible(now, chosen["when"], chosen["types"], chosen["tags"])
            arm = {"limit": limit, "memories": True, "messages": False, "k1": K1, "b": B,
                   "names": named, **chosen}  # fmt: skip
            (sql,) = await repo.keyword_each([space.owner], query, **arm)
            mine = space_cache.keyword(copy, scoring, mask)
            close_tops(sql.scores, mine.scores, 1e-9)
            assert sql.max_score == pytest.approx(mine.max_score, rel=1e-9)
            for k in set(sql.scores) & set(mine.scores):
                assert (sql.plain or {})[k] == pytest.approx((mine.plain or {})[k], abs=1e-9)
            checked["keyword"] += bool(sql.scores)
            seeds = [i for _, i in sorted(sql.scores, key=lambda k: -sql.scores[k])[:3]]
            if seeds:
                (more,) = await repo.keyword_each(
                    [space.owner], query, [seeds], terms=5, min_df=2, **arm
                )
                again = space_cache.expansion(copy, scoring, mask, seeds, terms=5, min_df=2)
                close_tops(more.scores, again, 1e-9)
                checked["expansion"] += bool(more.scores)
            (vector,) = await embedder.embed([query])
            (cosines,) = await repo.vector_each(
                [space.owner], vector, exact=[True], limit=limit, model=embedder.model,
                types=chosen["types"], tags=chosen["tags"], when=chosen["when"],
            )  # fmt: skip
            near = space_cache.nearest(copy, vector, embedder.model, limit, mask)
            close_tops(cosines, near, 1e-5)
            checked["vector"] += bool(cosines)
            every = [uuid.UUID(i) for i in space.ids]
            asked = every[::3]
            rows = await repo.rows_each([space.owner], [every], asked, when=chosen["when"])
            got, stored = space_cache.rows(copy, every, asked, copy.visible(now, chosen["when"]))
            assert got == rows.candidates
            assert set(stored) == set(rows.vectors)
            for key, v in stored.items():
                assert v.tolist() == rows.vectors[key].tolist()
    # the random cases reached every arm, and not only with empty results
    assert min(checked.values()) >= 10, checked


async def on_citus(engine: AsyncEngine) -> bool:
    async with engine.connect() as conn:
        found = await conn.scalar(
            text("SELECT current_setting('citus.propagate_set_commands', true)")
        )
        return found is not None


async def version(engine: AsyncEngine, owner: str) -> int:
    async with engine.connect() as conn:
        found = await conn.execute(
            text("SELECT version FROM search_stats WHERE user_id = :o"), {"o": owner}
        )
        return int(found.scalar_one())


async def test_every_write_of_a_space_moves_its_version_and_usage_does_not(space: Space) -> None:
    if await on_citus(space.superuser):
        pytest.skip("no versions on Citus: no copies there (migration 0024)")
    seen = [await version(space.superuser, space.owner)]
    assert seen[0] > 0
    one = uuid.UUID(space.ids[0])

    async def moved(statement: str) -> None:
        async with space.superuser.begin() as conn:
            await conn.execute(text(statement), {"id": one})
        seen.append(await version(space.superuser, space.owner))
        assert seen[-1] > seen[-2], statement

    await moved("UPDATE memory_items SET importance = 0.9 WHERE id = :id")
    await moved("UPDATE memory_items SET tags = '{boat}' WHERE id = :id")
    await moved("UPDATE memory_items SET expires_at = now() + interval '1 day' WHERE id = :id")
    await moved("UPDATE memory_items SET deleted_at = now() WHERE id = :id")
    async with space.superuser.begin() as conn:
        await conn.execute(
            text(
                "UPDATE memory_items SET times_retrieved = times_retrieved + 1, "
                "last_retrieved_at = now(), metadata = '{\"n\": 1}' WHERE id = :id"
            ),
            {"id": one},
        )
    assert await version(space.superuser, space.owner) == seen[-1]  # usage is no write
    await moved("DELETE FROM memory_items WHERE id = :id")
    # a new memory through the member's door
    saved = await space.client.post(
        f"/v1/spaces/{space.space}/memories",
        json={"content": "the anchor chain is in the harbour shed", "type": "fact"},
        headers={**MEMBER, "X-User-Id": space.member},
    )
    assert saved.status_code == 201, saved.text
    assert await version(space.superuser, space.owner) > seen[-1]
    # a user's own rows stay at 0
    async with space.superuser.connect() as conn:
        own = await conn.execute(
            text(
                "SELECT count(*) FROM search_stats "
                "WHERE user_id NOT LIKE 'space:%' AND version <> 0"
            )
        )
        assert own.scalar_one() == 0


async def test_a_space_memory_cannot_be_scoped_to_an_agent(space: Space) -> None:
    async with space.superuser.connect() as conn:
        with pytest.raises(Exception, match="ck_memory_items_space_unscoped"):
            await conn.execute(
                text("UPDATE memory_items SET agent_id = 'bot' WHERE id = :id"),
                {"id": uuid.UUID(space.ids[1])},
            )


async def test_only_the_spaces_a_user_reads_have_a_version(space: Space) -> None:
    for user, expected in ((space.member, [space.owner]), (space.stranger, [])):
        async with read_transaction(space.engine, MemoryScope(user)) as reads:
            *_, found = await RetrievalRepository(reads).space_versions([space.owner], "q", "")
            assert [[space.owner][r["owner"]] for r in found] == expected


def test_the_cache_keeps_what_fits_and_drops_the_least_recent() -> None:
    def copy(owner: str, n: int, stamp: int = 1) -> SpaceCopy:
        items = [
            {"id": uuid.uuid4(), "content": "x" * 100, "type": "fact", "importance": 0.5,
             "created_at": START, "source": None, "source_message_id": None, "tags": [],
             "expires_at": None, "valid_to": None, "embedding_model": "m",
             "v": b"\x00\x02" + b"\x00\x00" + b"\x00\x3c" + b"\x00\x00"}
            for _ in range(n)
        ]  # fmt: skip
        return SpaceCopy.build(owner, Version(stamp, n, 3.0 * n), items, [])

    a, b, c = copy("space:a", 10), copy("space:b", 10), copy("space:c", 10)
    cache = SpaceCache(a.nbytes * 2 + 1, max_items=50)
    cache.put(a)
    cache.put(b)
    assert cache.get("space:a", a.stamp) is a  # now the most recent
    cache.put(c)
    assert cache.get("space:b", b.stamp) is None
    assert cache.get("space:a", a.stamp) is a and cache.get("space:c", c.stamp) is c
    assert cache.get("space:a", Version(2, 10, 30.0)) is None  # another version is no copy
    cache.put(copy("space:a", 10, stamp=2))
    assert len(cache) == 2 and cache.nbytes <= cache.max_bytes
    assert not cache.takes(Version(1, 51, 0.0)) and cache.takes(Version(1, 50, 0.0))
    cache.put(copy("space:big", 40))  # bigger than the whole cache: not kept
    assert cache.get("space:big", Version(1, 40, 120.0)) is None


async def test_a_copy_is_read_once_at_a_time_and_a_failed_read_is_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = SpaceCache(1 << 20, max_items=10)
    gate = asyncio.Event()
    reads: list[str] = []
    stamp = Version(1, 0, 0.0)

    async def slow() -> SpaceCopy:
        reads.append("slow")
        await gate.wait()
        return SpaceCopy.build("space:a", stamp, [], [])

    async def failing() -> SpaceCopy:
        reads.append("failing")
        raise OSError("the connection went away")

    cache.refresh("space:a", slow)
    cache.refresh("space:a", slow)  # one under way: not asked twice
    await asyncio.sleep(0)
    gate.set()
    await cache.settled()
    assert reads == ["slow"] and cache.get("space:a", stamp) is not None
    cache.refresh("space:b", failing)
    await cache.settled()
    assert "reading the copy of space:b failed" in caplog.text
    assert cache.get("space:b", stamp) is None
    cache.refresh("space:b", slow)  # asked again by the next query
    await cache.settled()
    assert reads == ["slow", "failing", "slow"]
    never = asyncio.Event()

    async def hanging() -> SpaceCopy:
        await never.wait()
        raise AssertionError

    cache.refresh("space:c", hanging)
    await cache.aclose()  # the process closing: the read under way is stopped
    await cache.settled()


QUESTIONS = (
    "where is the garden hose",
    "what about the boat engine in winter",
    "kitchen stove recipe",
    "roof ladder paint",
    "tomato water evening rain",
)


async def answers(
    client: httpx.AsyncClient, user: str, space: str
) -> list[list[tuple[str, float]]]:
    out = []
    for question in QUESTIONS:
        r = await client.post(
            "/v1/memory/query",
            json={"query": question, "min_score": 0.0},
            headers={**MEMBER, "X-User-Id": user, "X-Spaces": space},
        )
        assert r.status_code == 200, r.text
        out.append([(m["id"], round(m["relevance_score"], 6)) for m in r.json()["items"]])
    return out


async def test_a_service_with_copies_answers_as_one_without(
    space: Space, pg: EmbeddedPostgres, redis_srv: RedisServer, embedder: LocalEmbedder
) -> None:
    async def client_of(**overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
        settings = app_settings(
            pg, redis_srv.url, write_rate_limit_per_minute=0, api_key="k",
            admin_api_key="admin-key", **overrides,
        )  # fmt: skip
        app = create_app(settings, embedder=embedder)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                yield client, app.state.resources

    plain = client_of(space_cache_mb=0)
    copied = client_of()
    if await on_citus(space.superuser):
        pytest.skip("no copies on Citus: each space's statements route to its shard")
    (without, none), (with_copies, resources) = await anext(plain), await anext(copied)
    try:
        assert none.space_copies is None
        expected = await answers(without, space.member, space.space)
        assert any(expected)
        # the first query reads the space by its statements and has its copy read meanwhile
        assert await answers(with_copies, space.member, space.space) == expected
        await resources.space_copies.settled()
        assert len(resources.space_copies) == 1
        assert await answers(with_copies, space.member, space.space) == expected  # from the copy
        # a write is read on the next query
        saved = await with_copies.post(
            f"/v1/spaces/{space.space}/memories",
            json={"content": "the garden hose hangs on the barn gate", "type": "fact"},
            headers={**MEMBER, "X-User-Id": space.member},
        )
        assert saved.status_code == 201, saved.text
        after = await answers(with_copies, space.member, space.space)
        assert saved.json()["memory"]["id"] in [i for i, _ in after[0]]
        assert after == await answers(without, space.member, space.space)
        await resources.space_copies.settled()
        assert await answers(with_copies, space.member, space.space) == after  # the new copy
        # a revoked grant reads nothing of the space on the next request
        gone = await with_copies.delete(
            f"/v1/admin/spaces/{space.space}/members/{space.member}", headers=ADMIN
        )
        assert gone.status_code == 204
        assert not any(await answers(with_copies, space.member, space.space))
    finally:
        for stream in (plain, copied):
            await stream.aclose()
