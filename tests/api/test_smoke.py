from tests.helpers import add_messages, headers


async def test_store_and_query(client, user_id):
    await add_messages(client, user_id, ["I prefer uv over pip for Python dependency management"])
    r = await client.post("/v1/tools/query_memory", json={"query": "which package manager?"}, headers=headers(user_id))
    assert r.status_code == 200
    assert r.json()["memories"][0]["content"].startswith("I prefer uv")
