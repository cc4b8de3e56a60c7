"""query_memory failure paths, for real: Postgres stopped, embedder failing, Redis absent or
killed, rate limits, and the audit line every retrieval leaves behind.

The embedder here is a fake on purpose: it stands for a broken model or endpoint, not for the
database or the cache, which are the real servers.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from redis.asyncio import Redis

from app.adapters.embedder import LocalEmbedder, Vectors
from app.db import user_session
from app.embedded import EmbeddedPostgres
from app.errors import EmbeddingError
from app.services.memory import MemoryInput, MemoryService
from tests.helpers import headers, shared_space
from tests.redis_server import RedisServer
from tests.servers import temporary_redis

QUERY = "/v1/memory/query"
TOOL = "/v1/tools/query_memory"

ZEPPELIN = "The zeppelin museum is in Friedrichshafen"
AIRSHIP = "I love big dirigibles and blimps"  # no shared lexeme with the zeppelin queries


class FailingEmbedder:
    """An embedder whose model is down: same model name and dimension as the real one."""

    def __init__(self, real: LocalEmbedder) -> None:
        self.model = real.model
        self.dimension = real.dimension
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        raise EmbeddingError("embedding endpoint unavailable")


class HangingEmbedder(FailingEmbedder):
    """An embedder that never answers (the service's timeout must cut it off)."""

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        await asyncio.sleep(30)
        raise AssertionError("the query timeout should have cancelled this call")


def nonce() -> str:
    return "n" + uuid.uuid4().hex[:10]


async def store(app: FastAPI, user: str, items: Sequence[tuple[str, str]]) -> dict[str, str]:
    res = app.state.resources
    async with user_session(res.sessionmaker, user) as session, session.begin():
        ids = await MemoryService(session, res.embeddings).create_many(
            [MemoryInput(user_id=user, content=c, type=t) for c, t in items]
        )
    return {c: str(i) for (c, _), i in zip(items, ids, strict=True)}


async def post(client: httpx.AsyncClient, endpoint: str, user: str, **body: Any) -> dict[str, Any]:
    response = await client.post(endpoint, json=body, headers=headers(user))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def ids(data: dict[str, Any]) -> list[str]:
    return [i["id"] for i in data.get("items", data.get("memories", []))]


def meta(data: dict[str, Any]) -> dict[str, Any]:
    """The failure flags, wherever the endpoint puts them."""
    return data.get("metadata", data)  # type: ignore[no-any-return]


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server this test may kill."""
    with temporary_redis() as server:
        yield server


@pytest.fixture
def restore_pg(pg: EmbeddedPostgres) -> Iterator[EmbeddedPostgres]:
    try:
        yield pg
    finally:
        pg.start()
        assert pg.is_running()


@pytest.fixture
async def seeded(make_client: Callable[..., Any], user_id: str) -> AsyncIterator[dict[str, str]]:
    """The user's store, written with the working embedder (Redis on the shared server)."""
    async with make_client() as (_, app):
        yield await store(
            app,
            user_id,
            [(ZEPPELIN, "fact"), (AIRSHIP, "preference"), ("My sister lives in Oslo", "fact")],
        )


# -- Postgres ---------------------------------------------------------------------------------


async def test_postgres_stopped_fails_closed_on_both_endpoints(
    make_client: Callable[..., Any],
    restore_pg: EmbeddedPostgres,
    user_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pg = restore_pg
    async with make_client() as (client, app):
        await store(app, user_id, [(ZEPPELIN, "fact")])
        text = f"zeppelin museum {nonce()}"
        pg.stop()
        try:
            with caplog.at_level(logging.INFO, logger="app.audit"):
                for endpoint in (QUERY, TOOL):
                    for extra in ({}, {"types": ["fact"]}, {"sources": ["message"]}):
                        data = await post(client, endpoint, user_id, query=text, **extra)
                        assert ids(data) == [], (endpoint, extra)
                        assert meta(data)["error"] == "retrieval_unavailable"
                        assert meta(data)["rate_limited"] is False
        finally:
            pg.start()
        audits = [r for r in caplog.records if r.name == "app.audit"]
        assert len(audits) == 6
        assert all(r.fields["error"] == "retrieval_unavailable" for r in audits)  # type: ignore[attr-defined]

        # Back up, same app: the failure was not cached, the same query now finds the memory.
        for endpoint in (QUERY, TOOL):
            data = await post(client, endpoint, user_id, query=text)
            assert meta(data)["error"] is None
            assert len(ids(data)) == 1


# -- embedder -----------------------------------------------------------------------------------


@pytest.mark.parametrize("broken", [FailingEmbedder, HangingEmbedder])
async def test_embedder_failure_falls_back_to_keywords(
    make_client: Callable[..., Any],
    embedder: LocalEmbedder,
    seeded: dict[str, str],
    user_id: str,
    broken: type[FailingEmbedder],
) -> None:
    fake = broken(embedder)
    async with make_client(embedder=fake, query_timeout_s=0.5) as (client, _):
        for endpoint in (QUERY, TOOL):
            # Fresh texts: neither the vector nor the answer can come from the cache.
            data = await post(client, endpoint, user_id, query=f"zeppelin museum {nonce()}")
            assert meta(data)["degraded"] == "keyword_only"
            assert meta(data)["error"] is None
            assert ids(data) == [seeded[ZEPPELIN]]
            # Keyword-only really means no vector arm: a paraphrase finds nothing now.
            data = await post(client, endpoint, user_id, query=f"airship fan {nonce()}")
            assert meta(data)["degraded"] == "keyword_only"
            assert ids(data) == []
    assert fake.calls == 4


async def test_cached_query_vector_is_used_when_the_embedder_fails(
    make_client: Callable[..., Any],
    embedder: LocalEmbedder,
    seeded: dict[str, str],
    user_id: str,
) -> None:
    # A fixed text (no nonce, which would dilute the cosine towards the vector floor): whether
    # an earlier run cached its vector does not matter, the second half asserts the cache.
    text = "do I like airships?"
    async with make_client() as (client, _):
        warm = await post(client, QUERY, user_id, query=text, min_score=0.0)
        assert seeded[AIRSHIP] in ids(warm)  # found by its vector alone
    fake = FailingEmbedder(embedder)
    async with make_client(embedder=fake) as (client, _):
        # Another limit: a different answer-cache key, but the same text and so the same
        # cached query vector.
        data = await post(client, QUERY, user_id, query=text, min_score=0.0, limit=9)
        assert data["degraded"] is None and data["error"] is None
        assert seeded[AIRSHIP] in ids(data)
        assert fake.calls == 0  # the cache answered before the embedder was asked


# -- Redis ----------------------------------------------------------------------------------------


async def test_without_redis_answers_are_the_same(
    make_client: Callable[..., Any], seeded: dict[str, str], user_id: str
) -> None:
    queries = ["zeppelin museum", "airship fan", "where does my sister live?"]
    answers: dict[str | None, list[list[str]]] = {}
    for redis_url in ("shared", None):
        overrides = {} if redis_url else {"redis_url": None}
        async with make_client(**overrides) as (client, app):
            assert app.state.resources.cache.enabled is (redis_url is not None)
            got = []
            for q in queries:
                data = await post(client, QUERY, user_id, query=q, min_score=0.0)
                assert data["error"] is None and data["degraded"] is None
                got.append(ids(data))
                tool = await post(client, TOOL, user_id, query=q)
                assert tool["metadata"]["error"] is None
            answers[redis_url] = got
    assert answers["shared"] == answers[None]
    assert answers[None][0][0] == seeded[ZEPPELIN]
    assert seeded[AIRSHIP] in answers[None][1]


async def redis_keys(server: RedisServer, pattern: str) -> list[bytes]:
    client = Redis.from_url(server.url)
    try:
        return [k async for k in client.scan_iter(match=pattern)]
    finally:
        await client.aclose()


async def test_redis_killed_mid_test_and_restarted(
    make_client: Callable[..., Any],
    own_redis: RedisServer,
    seeded: dict[str, str],
    user_id: str,
) -> None:
    questions = ["zeppelin museum", "airship fan"]
    async with make_client(redis_url=own_redis.url) as (client, app):
        before = [
            ids(await post(client, QUERY, user_id, query=q, min_score=0.0)) for q in questions
        ]
        assert before[0] and before[1]
        assert await redis_keys(own_redis, "embedding_cache:*")

        own_redis.kill()
        for _ in range(2):
            for q, expected in zip(questions, before, strict=True):
                data = await post(client, QUERY, user_id, query=q, min_score=0.0)
                assert ids(data) == expected
                assert data["error"] is None and data["degraded"] is None
                tool = await post(client, TOOL, user_id, query=q)
                assert tool["metadata"]["error"] is None and tool["memories"]
        assert app.state.resources.cache.available is False

        own_redis.start()  # empty dataset
        assert await redis_keys(own_redis, "embedding_cache:*") == []
        await asyncio.sleep(app.state.resources.cache.retry_after_s + 0.1)  # breaker closes
        fresh = f"my sister {nonce()}"
        data = await post(client, QUERY, user_id, query=fresh, min_score=0.0)
        assert seeded["My sister lives in Oslo"] in ids(data)
        assert await redis_keys(own_redis, "embedding_cache:*")
        assert await redis_keys(own_redis, f"query_cache:{user_id}:*")
        assert app.state.resources.cache.available is True


# -- rate limit -----------------------------------------------------------------------------------


async def test_rate_limit_serves_the_cached_answer_or_nothing(
    make_client: Callable[..., Any],
    seeded: dict[str, str],
    user_id: str,
    other_user_id: str,
) -> None:
    async with make_client(rate_limit_per_minute=3) as (client, app):
        await store(app, other_user_id, [(ZEPPELIN, "fact")])
        answered = await post(client, TOOL, user_id, query="zeppelin museum")
        assert ids(answered) == [seeded[ZEPPELIN]]
        for endpoint in (QUERY, TOOL):
            assert not meta(await post(client, endpoint, user_id, query="Oslo"))["rate_limited"]

        # Fourth request of the minute: the same question gets its cached answer...
        limited = await post(client, TOOL, user_id, query="zeppelin museum")
        assert limited["metadata"]["rate_limited"] is True
        assert limited["memories"] == answered["memories"]
        # ...a new one gets nothing, on either endpoint.
        for endpoint in (TOOL, QUERY):
            data = await post(client, endpoint, user_id, query="where does my sister live")
            assert meta(data)["rate_limited"] is True
            assert ids(data) == []
            assert meta(data)["error"] is None

        # Another user is not affected.
        other = await post(client, TOOL, other_user_id, query="zeppelin museum")
        assert other["metadata"]["rate_limited"] is False
        assert len(other["memories"]) == 1
        assert ids(other) != ids(answered)


async def test_rate_limit_under_concurrency_admits_exactly_the_limit(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client(rate_limit_per_minute=3) as (client, app):
        await store(app, user_id, [(ZEPPELIN, "fact")])
        results = await asyncio.gather(
            *(
                post(client, TOOL if n % 2 else QUERY, user_id, query=f"zeppelin {n}")
                for n in range(10)
            )
        )
    admitted = [r for r in results if not meta(r)["rate_limited"]]
    assert len(admitted) == 3
    assert all(ids(r) for r in admitted)
    assert all(ids(r) == [] for r in results if meta(r)["rate_limited"])


# -- audit log ------------------------------------------------------------------------------------


async def test_audit_line_per_retrieval_without_the_raw_query(
    make_client: Callable[..., Any],
    seeded: dict[str, str],
    user_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = f"zeppelin museum tickets for my secret trip {nonce()}"
    caplog.set_level(logging.DEBUG)
    async with make_client() as (client, _):
        responses = []
        for endpoint in (QUERY, TOOL):
            response = await client.post(endpoint, json={"query": secret}, headers=headers(user_id))
            assert response.status_code == 200
            responses.append(response)
    # The start-up's model check opened one audited admin-mode transaction of its own.
    audits = [
        r for r in caplog.records if r.name == "app.audit" and r.getMessage() == "memory retrieval"
    ]
    assert len(audits) == 2
    for record, response in zip(audits, responses, strict=True):
        assert record.levelno == logging.INFO
        fields = record.fields  # type: ignore[attr-defined]
        assert fields["correlation_id"] == response.headers["x-correlation-id"]
        assert fields["user_id"] == user_id
        assert fields["query_sha256"] == hashlib.sha256(secret.encode()).hexdigest()
        body = response.json()
        assert fields["result_count"] == len(body.get("items", body.get("memories", [])))
        assert fields["result_count"] >= 1
        assert isinstance(fields["latency_ms"], float | int) and fields["latency_ms"] >= 0
        assert {"degraded", "error"} <= set(fields)
    leaked = [
        r
        for r in caplog.records
        if r.levelno >= logging.INFO and (secret in r.getMessage() or secret in repr(r.__dict__))
    ]
    assert leaked == []


# -- shared spaces ------------------------------------------------------------------------------


async def test_a_query_that_reads_a_space_fails_closed_and_degrades_as_the_users_does(
    make_client: Callable[..., Any],
    restore_pg: EmbeddedPostgres,
    embedder: LocalEmbedder,
    user_id: str,
) -> None:
    """The spaces' statements run on a connection of their own beside the user's
    (gather.gather_shared): Postgres stopped is an empty answer that says why on both doors,
    and a failing embedder leaves the keyword arm, which still finds the space's memory."""
    space, admin = f"ops-{nonce()}", {"Authorization": "Bearer admin-key"}
    shared = headers(user_id, **{"X-Spaces": space})
    async with make_client(admin_api_key=SecretStr("admin-key")) as (client, _):
        (saved,) = await shared_space(
            client, space, {user_id: "write"}, writer=user_id, content=ZEPPELIN, admin=admin
        )
        restore_pg.stop()
        try:
            for endpoint in (QUERY, TOOL):
                response = await client.post(
                    endpoint, json={"query": f"zeppelin museum {nonce()}"}, headers=shared
                )
                assert response.status_code == 200, response.text
                assert ids(response.json()) == []
                assert meta(response.json())["error"] == "retrieval_unavailable"
        finally:
            restore_pg.start()
    async with make_client(
        admin_api_key=SecretStr("admin-key"),
        embedder=FailingEmbedder(embedder),
    ) as (client, _):
        for endpoint in (QUERY, TOOL):
            response = await client.post(
                endpoint, json={"query": f"zeppelin museum {nonce()}"}, headers=shared
            )
            assert response.status_code == 200, response.text
            data = response.json()
            assert meta(data)["degraded"] == "keyword_only"
            assert ids(data) == [saved]
