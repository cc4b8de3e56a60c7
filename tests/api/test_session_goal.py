"""PUT /v1/conversations/{id}/session: the optional current goal of a session, kept in
Postgres (conversations.goal) with a copy in Redis."""

from redis.asyncio import Redis

from tests.helpers import add_messages, headers, new_conversation


async def test_goal_is_stored_in_the_session_hash(client, redis_srv, user_id):
    cid = await new_conversation(client, user_id)
    await add_messages(client, user_id, ["planning a trip to Kyoto"], conversation=cid)
    r = await client.put(
        f"/v1/conversations/{cid}/session", json={"goal": "book a ryokan"}, headers=headers(user_id)
    )
    assert r.status_code == 200, r.text
    assert r.json()["goal"] == "book a ryokan"
    got = await client.get(f"/v1/conversations/{cid}/session", headers=headers(user_id))
    assert got.json()["goal"] == "book a ryokan"
    redis = Redis.from_url(redis_srv.url)
    try:
        assert await redis.hget(f"session:{user_id}:{cid}", "goal") == b"book a ryokan"
        assert 0 < await redis.ttl(f"session:{user_id}:{cid}") <= 86400
    finally:
        await redis.aclose()
    cleared = await client.put(
        f"/v1/conversations/{cid}/session", json={"goal": None}, headers=headers(user_id)
    )
    assert cleared.json()["goal"] is None


async def test_goal_of_another_users_conversation_is_404(client, user_id, other_user_id):
    cid = await new_conversation(client, user_id)
    r = await client.put(
        f"/v1/conversations/{cid}/session", json={"goal": "x"}, headers=headers(other_user_id)
    )
    assert r.status_code == 404


async def test_goal_without_redis_comes_from_postgres(make_client, user_id):
    async with make_client(redis_url=None) as (c, _):
        cid = await new_conversation(c, user_id)
        await add_messages(c, user_id, ["planning a trip to Kyoto"], conversation=cid)
        r = await c.put(
            f"/v1/conversations/{cid}/session", json={"goal": "x"}, headers=headers(user_id)
        )
        assert r.status_code == 200, r.text
        got = await c.get(f"/v1/conversations/{cid}/session", headers=headers(user_id))
        assert got.status_code == 200, got.text
        assert got.json()["goal"] == "x"
        assert [m["content"] for m in got.json()["messages"]] == ["planning a trip to Kyoto"]


async def test_goal_survives_losing_the_redis_copy(client, redis_srv, user_id):
    cid = await new_conversation(client, user_id)
    r = await client.put(
        f"/v1/conversations/{cid}/session", json={"goal": "plan"}, headers=headers(user_id)
    )
    assert r.status_code == 200, r.text
    redis = Redis.from_url(redis_srv.url)
    try:
        assert await redis.delete(f"session:{user_id}:{cid}") == 1
    finally:
        await redis.aclose()
    got = await client.get(f"/v1/conversations/{cid}/session", headers=headers(user_id))
    assert got.json()["goal"] == "plan"
    assert got.json()["source"] == "database"
