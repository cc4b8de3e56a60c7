"""The Redis cache against a real redis-server: keys, TTLs, values, concurrency, outages."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from redis.asyncio import Redis

from app.adapters.cache import Cache, CacheUnavailableError, RateDecision, SessionState
from app.adapters.redis.breaker import MAX_CONNECTIONS
from bench.redis_pool import cpu_bound_threads
from tests.redis_server import RedisServer

LOGGER = "app.adapters.cache"
DAY = 86400
CONV = str(uuid.UUID(int=1))
CONV2 = str(uuid.UUID(int=2))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def vectors(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def message(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": str(i), "role": "user", "content": f"message {i}", "created_at": f"t{i}", **extra}


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def assert_ttl_near(ttl: int, expected: int, tolerance: int = 5) -> None:
    assert expected - tolerance <= ttl <= expected, f"TTL {ttl}, expected ~{expected}"


async def all_keys(client: Redis) -> set[str]:
    return {key.decode() async for key in client.scan_iter(count=1000)}


# -- embeddings ----------------------------------------------------------------------------


def test_embedding_key_is_sha256_of_model_colon_text() -> None:
    assert Cache.embedding_key("mini", "héllo") == "embedding_cache:" + sha("mini:héllo")
    assert Cache.embedding_key("a:b", "c") == Cache.embedding_key("a", "b:c")  # as specified


async def test_embedding_round_trip_stores_raw_float32_with_7_day_ttl(
    cache: Cache, redis_client: Redis
) -> None:
    vecs = vectors(2)
    await cache.set_embeddings("mini", ["one", "two"], vecs)

    key = "embedding_cache:" + sha("mini:one")
    assert await redis_client.get(key) == vecs[0].astype("<f4").tobytes()
    assert_ttl_near(await redis_client.ttl(key), 7 * DAY)
    assert await all_keys(redis_client) == {key, "embedding_cache:" + sha("mini:two")}

    got = await cache.get_embeddings("mini", ["one", "two"])
    for stored, original in zip(got, vecs, strict=True):
        assert stored is not None
        assert stored.dtype == np.float32
        assert stored.tobytes() == original.tobytes()
    got[0][0] = 42.0  # callers get their own writable copy


async def test_get_embeddings_partial_hits_in_one_mget(cache: Cache, redis_client: Redis) -> None:
    vecs = vectors(2, seed=1)
    await cache.set_embeddings("mini", ["a", "c"], vecs)
    await redis_client.config_resetstat()

    got = await cache.get_embeddings("mini", ["a", "b", "c", "a"])

    assert got[1] is None
    assert [g is not None for g in got] == [True, False, True, True]
    np.testing.assert_array_equal(got[0], vecs[0])
    np.testing.assert_array_equal(got[2], vecs[1])
    commands = await redis_client.info("commandstats")
    assert commands["cmdstat_mget"]["calls"] == 1
    assert "cmdstat_get" not in commands
    assert (cache.stats.embedding_hits, cache.stats.embedding_misses) == (3, 1)
    assert cache.stats.embedding_hit_ratio() == pytest.approx(0.75)


async def test_embeddings_are_per_model_and_deletable(cache: Cache, redis_client: Redis) -> None:
    await cache.set_embeddings("model-a", ["x", "y"], vectors(2))
    assert await cache.get_embeddings("model-b", ["x"]) == [None]

    assert await cache.delete_embeddings("model-a", ["x", "missing"]) == 1
    assert await all_keys(redis_client) == {"embedding_cache:" + sha("model-a:y")}
    assert await cache.get_embeddings("model-a", []) == []


async def test_set_embeddings_rejects_mismatched_rows(cache: Cache) -> None:
    with pytest.raises(ValueError, match="2 vector rows"):
        await cache.set_embeddings("m", ["a", "b"], vectors(3))


# -- session state -------------------------------------------------------------------------


async def test_append_keeps_last_n_in_order_with_24h_ttl(cache: Cache, redis_client: Redis) -> None:
    created = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    first = [message(1, created_at=created, extra="dropped"), message(2), message(3)]
    await cache.extend_session("alice", CONV, first, keep=4, after_id=None)
    await cache.extend_session("alice", CONV, [message(4), message(5)], keep=4, after_id="3")

    key = f"session:alice:{CONV}"
    assert await all_keys(redis_client) == {key}
    fields = await redis_client.hgetall(key)
    assert set(fields) == {b"messages", b"updated_at"}  # no goal set
    assert json.loads(fields[b"messages"]) == [message(i) for i in (2, 3, 4, 5)]
    assert datetime.fromisoformat(fields[b"updated_at"].decode()).tzinfo is not None
    assert_ttl_near(await redis_client.ttl(key), DAY)

    state = await cache.get_session("alice", CONV)
    assert state == SessionState(
        messages=[message(i) for i in (2, 3, 4, 5)],
        goal=None,
        updated_at=fields[b"updated_at"].decode(),
    )


async def test_stored_message_has_exactly_the_spec_fields(
    cache: Cache, redis_client: Redis
) -> None:
    msg_id = uuid.UUID(int=7)
    created = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    raw = {"id": msg_id, "role": "assistant", "content": "hi", "created_at": created, "x": 1}
    await cache.extend_session("alice", CONV, [raw], keep=10, after_id=None)

    stored = json.loads(await redis_client.hget(f"session:alice:{CONV}", "messages"))
    assert stored == [
        {"id": str(msg_id), "role": "assistant", "content": "hi", "created_at": created.isoformat()}
    ]


async def test_extending_from_where_the_copy_ends_keeps_the_last_n(cache: Cache) -> None:
    await cache.extend_session("bob", CONV, [message(0)], keep=5, after_id=None)
    for i in range(1, 20):
        await cache.extend_session("bob", CONV, [message(i)], keep=5, after_id=str(i - 1))
    state = await cache.get_session("bob", CONV)
    assert state is not None
    assert [m["id"] for m in state.messages] == [str(i) for i in range(15, 20)]


async def test_a_copy_that_does_not_end_where_the_write_began_is_dropped(
    cache: Cache, redis_client: Redis
) -> None:
    await cache.extend_session("bob", CONV, [message(0), message(1)], keep=5, after_id=None)
    # Message 2 was stored in Postgres, but its cache write was lost: the copy ends at 1.
    await cache.extend_session("bob", CONV, [message(3)], keep=5, after_id="2")
    assert await redis_client.exists(f"session:bob:{CONV}") == 0
    # With no copy, a later message does not start one (it would be a partial history).
    await cache.extend_session("bob", CONV, [message(4)], keep=5, after_id="3")
    assert await cache.get_session("bob", CONV) is None


async def test_racing_writes_from_one_point_never_leave_a_gap(cache: Cache) -> None:
    await cache.extend_session("bob", CONV, [message(0)], keep=100, after_id=None)
    await asyncio.gather(
        *(
            cache.extend_session("bob", CONV, [message(i)], keep=100, after_id="0")
            for i in range(1, 11)
        )
    )
    state = await cache.get_session("bob", CONV)
    # At most one of them extended the copy; any other found it moved on and dropped it.
    if state is not None:
        ids = [m["id"] for m in state.messages]
        assert ids[0] == "0" and len(ids) <= 2


async def test_set_session_rebuilds_and_replaces(cache: Cache, redis_client: Redis) -> None:
    await cache.set_session("carol", CONV, [message(i) for i in range(5)], "plan a trip", keep=3)
    key = f"session:carol:{CONV}"
    assert_ttl_near(await redis_client.ttl(key), DAY)
    assert await redis_client.hget(key, "goal") == b"plan a trip"
    state = await cache.get_session("carol", CONV)
    assert state is not None
    assert [m["id"] for m in state.messages] == ["2", "3", "4"]
    assert state.goal == "plan a trip"

    await redis_client.expire(key, 100)
    await cache.set_session("carol", CONV, [message(9)], None, keep=3)

    assert set(await redis_client.hgetall(key)) == {b"messages", b"updated_at"}
    assert_ttl_near(await redis_client.ttl(key), DAY)
    assert await cache.get_session("carol", CONV) == SessionState(
        messages=[message(9)],
        goal=None,
        updated_at=(await redis_client.hget(key, "updated_at")).decode(),
    )


async def test_set_goal_only_on_existing_session(cache: Cache, redis_client: Redis) -> None:
    assert await cache.set_goal("dave", CONV, "learn go") is False
    assert await all_keys(redis_client) == set()

    await cache.extend_session("dave", CONV, [message(1)], keep=5, after_id=None)
    key = f"session:dave:{CONV}"
    await redis_client.expire(key, 100)
    assert await cache.set_goal("dave", CONV, "learn go") is True
    assert await redis_client.hget(key, "goal") == b"learn go"
    assert_ttl_near(await redis_client.ttl(key), DAY)
    state = await cache.get_session("dave", CONV)
    assert state is not None and state.goal == "learn go"
    assert [m["id"] for m in state.messages] == ["1"]

    assert await cache.set_goal("dave", CONV, None) is True
    assert await redis_client.hexists(key, "goal") == 0


async def test_sessions_are_per_conversation(cache: Cache) -> None:
    await cache.extend_session("erin", CONV, [message(1)], keep=5, after_id=None)
    assert await cache.get_session("erin", CONV2) is None
    assert await cache.get_session("erin2", CONV) is None


async def test_conversation_id_with_colon_is_rejected(cache: Cache) -> None:
    with pytest.raises(ValueError, match="':'"):
        await cache.get_session("erin", "a:b")


# -- rate limiting -------------------------------------------------------------------------


async def test_rate_limit_is_atomic_under_concurrency(cache: Cache, redis_client: Redis) -> None:
    decisions = await asyncio.gather(*(cache.hit_rate_limit("frank", 10) for _ in range(50)))

    assert sum(d.allowed for d in decisions) == 10
    assert sorted(d.count for d in decisions) == list(range(1, 51))
    assert all(d.allowed == (d.count <= 10) for d in decisions)
    assert all(d.limit == 10 and 59 <= d.reset_s <= 60 for d in decisions)
    assert await redis_client.get("rate_limit:frank") == b"50"
    assert_ttl_near(await redis_client.ttl("rate_limit:frank"), 60)
    assert await all_keys(redis_client) == {"rate_limit:frank"}


async def test_rate_limit_holds_while_other_threads_hold_the_cpu(
    cache: Cache, redis_client: Redis
) -> None:
    """CI once saw 24 of 50 admitted: cold connects starved of the GIL timed out and failed open."""
    with cpu_bound_threads(2):
        decisions = await asyncio.gather(*(cache.hit_rate_limit("flo", 10) for _ in range(50)))

    assert sum(d.allowed for d in decisions) == 10
    assert cache.stats.errors == 0
    assert await redis_client.get("rate_limit:flo") == b"50"


async def test_a_burst_shares_a_bounded_pool_of_connections(
    cache: Cache, redis_client: Redis
) -> None:
    own_id = await redis_client.client_id()
    decisions = await asyncio.gather(
        *(cache.hit_rate_limit("fern", 100) for _ in range(200)),
        *(cache.get_query_result("fern", f"q{n}") for n in range(100)),
    )

    clients = [c for c in await redis_client.client_list() if int(c["id"]) != own_id]
    assert 1 <= len(clients) <= MAX_CONNECTIONS
    assert sorted(d.count for d in decisions[:200]) == list(range(1, 201))
    assert await redis_client.get("rate_limit:fern") == b"200"
    assert cache.stats.errors == 0


async def test_rate_limit_window_expires(cache: Cache, redis_client: Redis) -> None:
    results = [await cache.hit_rate_limit("gina", 2, window_s=1) for _ in range(3)]
    assert [r.allowed for r in results] == [True, True, False]
    assert 0 < await redis_client.pttl("rate_limit:gina") <= 1000

    await asyncio.sleep(1.2)

    again = await cache.hit_rate_limit("gina", 2, window_s=1)
    assert (again.allowed, again.count) == (True, 1)


async def test_rate_limit_window_is_fixed_from_the_first_hit(
    cache: Cache, redis_client: Redis
) -> None:
    await cache.hit_rate_limit("gus", 5, window_s=2)
    await asyncio.sleep(0.5)
    second = await cache.hit_rate_limit("gus", 5, window_s=2)

    assert second.count == 2
    assert second.reset_s == 2  # ceil of ~1.5 s left, not a fresh 2 s window
    assert 0 < await redis_client.pttl("rate_limit:gus") <= 1600


async def test_rate_limit_off_when_limit_not_positive(cache: Cache, redis_client: Redis) -> None:
    for limit in (0, -1):
        assert await cache.hit_rate_limit("hank", limit) == RateDecision(True, 0, limit, 0)
    assert await all_keys(redis_client) == set()


async def test_rate_limit_repairs_counter_without_ttl(cache: Cache, redis_client: Redis) -> None:
    await redis_client.set("rate_limit:ivan", 5)  # e.g. written by an older deployment
    decision = await cache.hit_rate_limit("ivan", 10)
    assert decision.count == 6
    assert_ttl_near(await redis_client.ttl("rate_limit:ivan"), 60)


# -- query result cache --------------------------------------------------------------------


async def test_query_cache_hit_and_invalidation(cache: Cache, redis_client: Redis) -> None:
    assert await cache.get_query_result("jane", "q1") is None
    await cache.set_query_result("jane", "q1", b"payload-1")

    key0 = f"query_cache:jane:0:{sha('q1')}"
    assert await redis_client.get(key0) == b"payload-1"
    assert_ttl_near(await redis_client.ttl(key0), 60)
    assert await cache.get_query_result("jane", "q1") == b"payload-1"
    assert await cache.get_query_result("jane", "q2") is None

    await cache.invalidate_user("jane")
    assert await redis_client.get("query_gen:jane") == b"1"
    assert await cache.get_query_result("jane", "q1") is None
    assert await redis_client.exists(key0) == 1  # unreachable, left to expire

    await cache.set_query_result("jane", "q1", b"payload-2")
    assert await redis_client.get(f"query_cache:jane:1:{sha('q1')}") == b"payload-2"
    assert await cache.get_query_result("jane", "q1") == b"payload-2"
    assert (cache.stats.query_hits, cache.stats.query_misses) == (2, 3)


async def test_admit_query_is_the_three_lookups_in_one_round_trip(
    cache: Cache, redis_client: Redis
) -> None:
    """admit_query counts the query (RATE_LIMIT_LUA's counter), reads the cached answer under
    the user's generation and the query vector's key, as hit_rate_limit, get_query_result and
    get_embeddings would, in one script call."""
    vector = np.arange(4, dtype=np.float32) / 10
    await cache.set_embeddings("m", ["what do I like?"], vector[None, :])
    await cache.set_query_result("lea", "k", b"answer-0")
    calls: list[str] = []
    guarded = cache._guarded

    async def counted(op: str, *a: Any, **kw: Any) -> Any:
        calls.append(op)
        return await guarded(op, *a, **kw)

    cache._guarded = counted  # type: ignore[method-assign]
    first = await cache.admit_query("lea", 2, "k", "m", "what do I like?")
    assert calls == ["admit_query"]
    assert first.decision == RateDecision(allowed=True, count=1, limit=2, reset_s=60)
    assert first.answer == b"answer-0" and first.looked_up
    assert first.vector is not None and np.array_equal(first.vector, vector)
    assert_ttl_near(await redis_client.ttl("rate_limit:lea"), 60)

    await cache.invalidate_user("lea")  # the answer is now unreachable; a new one is stored
    second = await cache.admit_query("lea", 2, "k", "m", "something else")
    assert (second.answer, second.vector, second.decision.count) == (None, None, 2)
    await cache.set_query_result("lea", "k", b"answer-1")  # under the generation it saw
    assert await redis_client.get(f"query_cache:lea:1:{sha('k')}") == b"answer-1"
    third = await cache.admit_query("lea", 2, "k", "m", "what do I like?")
    assert not third.decision.allowed and third.answer == b"answer-1"
    # No limit: nothing counted; the lookups still happen.
    free = await cache.admit_query("lea", 0, "k", "m", "what do I like?")
    assert free.decision == RateDecision(allowed=True, count=0, limit=0, reset_s=0)
    assert free.answer == b"answer-1"
    assert await redis_client.get("rate_limit:lea") == b"3"
    assert (cache.stats.query_hits, cache.stats.embedding_hits) == (3, 3)


async def test_admit_query_fails_open_when_redis_stops_and_when_disabled(
    own_redis_server: RedisServer,
) -> None:
    disabled = Cache(None)
    admitted = await disabled.admit_query("u", 1, "k", "m", "t")
    assert admitted.decision.allowed and admitted.answer is None and not admitted.looked_up
    cache = Cache.from_url(own_redis_server.url, retry_after_s=30.0)
    try:
        await cache.set_query_result("u", "k", b"answer")
        assert (await cache.admit_query("u", 1, "k", "m", "t")).answer == b"answer"
        own_redis_server.stop()
        # Over the limit of 1 had Redis counted it, and a cached answer: neither is reachable.
        admitted = await cache.admit_query("u", 1, "k", "m", "t")
        assert admitted.decision.allowed and admitted.answer is None and not admitted.looked_up
        assert cache.stats.errors == 1
    finally:
        await cache.aclose()


async def test_query_result_computed_before_invalidation_stays_hidden(cache: Cache) -> None:
    assert await cache.get_query_result("kate", "q") is None  # request starts, misses
    await cache.invalidate_user("kate")  # a write lands while it computes
    await cache.set_query_result("kate", "q", b"stale")  # the request stores its answer

    assert await cache.get_query_result("kate", "q") is None


async def test_query_cache_is_per_user(cache: Cache) -> None:
    await cache.set_query_result("liam", "q", b"liam's")
    await cache.invalidate_user("liam2")
    assert await cache.get_query_result("liam2", "q") is None
    assert await cache.get_query_result("liam", "q") == b"liam's"


# -- GDPR purge ----------------------------------------------------------------------------


async def populate_user(cache: Cache, user: str) -> set[str]:
    """Create one key of every kind for `user`; return their names, computed by hand."""
    await cache.extend_session(user, CONV, [message(1)], keep=5, after_id=None)
    await cache.hit_rate_limit(user, 10)
    await cache.hit_rate_limit(user, 10, bucket="write_limit")
    await cache.set_query_result(user, "q", b"v0")
    await cache.invalidate_user(user)
    await cache.set_query_result(user, "q", b"v1")
    await cache.set_verdicts(user, {sha("v"): True}, 60)
    return {
        f"session:{user}:{CONV}",
        f"rate_limit:{user}",
        f"write_limit:{user}",
        f"query_gen:{user}",
        f"query_cache:{user}:0:{sha('q')}",
        f"query_cache:{user}:1:{sha('q')}",
        f"judge:{user}:{sha('v')}",
    }


async def test_verdicts_round_trip_per_user_with_their_ttl(
    cache: Cache, redis_client: Redis
) -> None:
    digest = cache.verdict_digest("judge", "What does  Alice eat?", "Alice is vegetarian")
    assert digest == cache.verdict_digest("judge", "what does alice eat?", "Alice is vegetarian")
    assert digest != cache.verdict_digest("other", "what does alice eat?", "Alice is vegetarian")
    await cache.set_verdicts("alice", {digest: True, sha("no"): False}, 60)
    assert await cache.get_verdicts("alice", [digest, sha("no"), sha("x")]) == [True, False, None]
    assert await cache.get_verdicts("bob", [digest]) == [None]
    assert 0 < await redis_client.ttl(f"judge:alice:{digest}") <= 60
    await cache.set_verdicts("bob", {digest: True}, 0)  # a TTL of 0 stores nothing
    assert await cache.get_verdicts("bob", [digest]) == [None]


async def test_delete_user_removes_only_that_users_keys(cache: Cache, redis_client: Redis) -> None:
    users = ["alice", "alice2", "alice:x", "a*b", "axxb", "a[b]"]
    keys = {user: await populate_user(cache, user) for user in users}
    await cache.extend_session("alice", CONV2, [message(2)], keep=5, after_id=None)
    keys["alice"].add(f"session:alice:{CONV2}")
    await cache.set_embeddings("m", ["alice"], vectors(1))
    everything = set().union(*keys.values()) | {"embedding_cache:" + sha("m:alice")}
    assert await all_keys(redis_client) == everything

    assert await cache.delete_user("alice") == 8
    assert await all_keys(redis_client) == everything - keys["alice"]

    assert await cache.delete_user("a*b") == 7
    assert await cache.delete_user("a[b]") == 7
    assert await all_keys(redis_client) == everything - keys["alice"] - keys["a*b"] - keys["a[b]"]

    assert await cache.delete_user("nobody") == 0
    assert await cache.get_session("alice2", CONV) is not None


# -- disabled ------------------------------------------------------------------------------


async def test_disabled_cache_is_a_noop(redis_client: Redis) -> None:
    cache = Cache.from_url(None)
    assert (cache.enabled, cache.available) == (False, False)
    assert await cache.ping() is False
    assert await cache.get_embeddings("m", ["a", "b"]) == [None, None]
    await cache.set_embeddings("m", ["a"], vectors(1))
    assert await cache.delete_embeddings("m", ["a"]) == 0
    await cache.extend_session("u", CONV, [message(1)], keep=5, after_id=None)
    await cache.set_session("u", CONV, [message(1)], "g", keep=5)
    assert await cache.get_session("u", CONV) is None
    assert await cache.set_goal("u", CONV, "g") is False
    assert await cache.hit_rate_limit("u", 10) == RateDecision(True, 0, 10, 0)
    await cache.set_query_result("u", "q", b"v")
    assert await cache.get_query_result("u", "q") is None
    await cache.invalidate_user("u")
    await cache.set_verdicts("u", {sha("v"): False}, 60)
    assert await cache.get_verdicts("u", [sha("v")]) == [None]  # a miss: judged uncached
    assert await cache.delete_user("u") == 0
    await cache.aclose()
    assert cache.stats.errors == 0
    assert Cache.from_url("").enabled is False
    assert await all_keys(redis_client) == set()


# -- outages -------------------------------------------------------------------------------

Call = Callable[[Cache], Awaitable[Any]]

# Every degrading method with the default it must return while Redis is down.
DEFAULTS: list[tuple[str, Call, Any]] = [
    ("ping", lambda c: c.ping(), False),
    ("get_embeddings", lambda c: c.get_embeddings("m", ["a", "b"]), [None, None]),
    ("set_embeddings", lambda c: c.set_embeddings("m", ["a"], vectors(1)), None),
    ("delete_embeddings", lambda c: c.delete_embeddings("m", ["a"]), 0),
    (
        "extend_session",
        lambda c: c.extend_session("u", CONV, [message(1)], keep=5, after_id=None),
        None,
    ),
    ("set_session", lambda c: c.set_session("u", CONV, [message(1)], None, keep=5), None),
    ("get_session", lambda c: c.get_session("u", CONV), None),
    ("set_goal", lambda c: c.set_goal("u", CONV, "g"), False),
    ("hit_rate_limit", lambda c: c.hit_rate_limit("u", 1), RateDecision(True, 0, 1, 0)),
    ("set_query_result", lambda c: c.set_query_result("u", "q", b"v"), None),
    ("get_query_result", lambda c: c.get_query_result("u", "q"), None),
    ("invalidate_user", lambda c: c.invalidate_user("u"), None),
    ("set_verdicts", lambda c: c.set_verdicts("u", {"d": True}, 60), None),
    ("get_verdicts", lambda c: c.get_verdicts("u", ["d"]), None),  # down: not a miss
]


async def assert_all_default_quickly(cache: Cache) -> None:
    for name, call, default in DEFAULTS:
        started = time.monotonic()
        result = await call(cache)
        elapsed = time.monotonic() - started
        assert elapsed < 1.5, f"{name} took {elapsed:.2f}s"
        assert result == default, name


async def test_redis_down_at_start(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    cache = Cache.from_url("unix:///tmp/pgr-redis-does-not-exist/redis.sock", retry_after_s=0.0)
    try:
        assert cache.enabled and not cache.available
        await assert_all_default_quickly(cache)
        assert cache.available is False
        assert cache.stats.errors >= len(DEFAULTS) - 1
        assert len(warnings_of(caplog)) == 1
        with pytest.raises(CacheUnavailableError):
            await cache.delete_user("u")
        assert len(warnings_of(caplog)) == 1
    finally:
        await cache.aclose()


async def test_redis_killed_then_restarted(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    cache = Cache.from_url(own_redis_server.url, retry_after_s=0.3)
    try:
        await cache.set_embeddings("m", ["a"], vectors(1))
        assert (await cache.get_embeddings("m", ["a"]))[0] is not None
        assert (await cache.hit_rate_limit("u", 1)).count == 1
        assert cache.available

        own_redis_server.kill()
        await assert_all_default_quickly(cache)
        await asyncio.sleep(0.35)  # breaker half-open: Redis is tried again, still dead
        await assert_all_default_quickly(cache)

        assert cache.available is False
        assert cache.stats.errors >= 2
        assert len(warnings_of(caplog)) == 1
        with pytest.raises(CacheUnavailableError):
            await cache.delete_user("u")
        assert len(warnings_of(caplog)) == 1

        own_redis_server.restart()
        await asyncio.sleep(0.35)
        vec = vectors(1, seed=5)
        await cache.set_embeddings("m", ["b"], vec)
        got = await cache.get_embeddings("m", ["b"])
        assert got[0] is not None and got[0].tobytes() == vec[0].tobytes()
        assert cache.available is True
        assert await cache.ping() is True
        # scripts were lost with the old process; they must be reloaded transparently
        assert (await cache.hit_rate_limit("u", 1)).count == 1
        assert await cache.set_goal("u", CONV, "g") is False
        assert await cache.delete_user("u") == 1
        recovered = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.INFO]
        assert [r.getMessage() for r in recovered] == ["Redis available again"]
    finally:
        await cache.aclose()

    async with Redis.from_url(own_redis_server.url) as client:
        assert await client.exists("embedding_cache:" + sha("m:b")) == 1


async def test_circuit_breaker_skips_redis_until_retry_after(
    own_redis_server: RedisServer,
) -> None:
    cache = Cache.from_url(own_redis_server.url, retry_after_s=30.0)
    try:
        own_redis_server.kill()
        assert await cache.get_embeddings("m", ["a"]) == [None]
        assert cache.stats.errors == 1
        own_redis_server.start()
        for _ in range(5):  # Redis is back, but the breaker has not let anyone try yet
            assert await cache.get_embeddings("m", ["a"]) == [None]
            assert (await cache.hit_rate_limit("u", 5)).count == 0
        assert cache.stats.errors == 1
        assert cache.stats.embedding_misses == 6
        assert await cache.ping() is True  # an explicit probe ignores the breaker
        assert await cache.delete_user("u") == 0  # so does a purge
    finally:
        await cache.aclose()


async def test_one_warning_per_interval(
    own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    cache = Cache.from_url(own_redis_server.url, warn_interval_s=0.3, retry_after_s=0.0)
    try:
        own_redis_server.kill()
        for _ in range(5):
            await cache.get_session("u", CONV)
        assert len(warnings_of(caplog)) == 1
        await asyncio.sleep(0.35)
        for _ in range(5):
            await cache.get_session("u", CONV)
        assert len(warnings_of(caplog)) == 2
        assert (
            "4 failures since the previous warning were not logged"
            in warnings_of(caplog)[1].getMessage()
        )
        assert cache.stats.errors == 10
    finally:
        await cache.aclose()


async def test_hung_redis_times_out_and_invalidation_is_not_lost(
    own_redis_server: RedisServer,
) -> None:
    cache = Cache.from_url(own_redis_server.url, retry_after_s=1.0)
    try:
        await cache.set_query_result("u", "q", b"before the write")
        assert await cache.get_query_result("u", "q") == b"before the write"

        own_redis_server.pause()
        started = time.monotonic()
        assert await cache.get_query_result("u", "q") is None
        assert time.monotonic() - started < 1.5
        await cache.invalidate_user("u")  # breaker open: the INCR cannot be sent now
        own_redis_server.resume()

        await asyncio.sleep(1.1)
        assert await cache.get_query_result("u", "q") is None  # pending INCR applied first
        async with Redis.from_url(own_redis_server.url) as client:
            assert await client.get("query_gen:u") == b"1"
            assert await client.get(f"query_cache:u:0:{sha('q')}") == b"before the write"
    finally:
        await cache.aclose()
