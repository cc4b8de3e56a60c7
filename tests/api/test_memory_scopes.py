"""Memory scopes over HTTP (issue 43, docs/agents.md): an agent's and a run's memory inside the
user's, an agent-bound key, and shared spaces with read and write grants.

Every door reads the same headers into one Caller (app.runtime.identity.scope_claim), so these
tests go through the agent tool, POST /v1/memory/query, save_memory and the spaces' routes;
tests/test_rls.py's scope tests check the same lines as the service role in raw SQL.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from app.adapters.embedder import LocalEmbedder
from app.embedded import EmbeddedPostgres
from app.main import create_app
from tests.redis_server import RedisServer
from tests.servers import app_settings

TOOL = "/v1/tools/query_memory"
QUERY = "/v1/memory/query"
SAVE = "/v1/tools/save_memory"
ADMIN = "Bearer admin-key"
SERVICE = "Bearer service-key"


@dataclass
class World:
    client: httpx.AsyncClient
    run: str

    def user(self, name: str) -> str:
        return f"{name}-{self.run}"


@pytest.fixture
async def world(
    pg: EmbeddedPostgres, redis_srv: RedisServer, embedder: LocalEmbedder
) -> AsyncIterator[World]:
    settings = app_settings(
        pg,
        redis_srv.url,
        write_rate_limit_per_minute=0,
        api_key="service-key",
        admin_api_key="admin-key",
    )
    app = create_app(settings, embedder=embedder)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield World(client, uuid.uuid4().hex[:8])


def as_user(user: str, **scope: str) -> dict[str, str]:
    names = {"agent": "X-Agent-Id", "run": "X-Run-Id", "mode": "X-Scope-Mode", "spaces": "X-Spaces"}
    return {
        "Authorization": SERVICE,
        "X-User-Id": user,
        **{names[k]: v for k, v in scope.items()},
    }


async def save(w: World, headers: dict[str, str], content: str) -> str:
    r = await w.client.post(SAVE, json={"content": content, "type": "fact"}, headers=headers)
    assert r.status_code == 200, r.text
    return str(r.json()["memory"]["id"])


async def found(w: World, headers: dict[str, str], query: str) -> dict[str, dict[str, Any]]:
    """The items the agent tool and the memory query return, by content (both doors agree)."""
    tool = await w.client.post(TOOL, json={"query": query}, headers=headers)
    assert tool.status_code == 200, tool.text
    memory = await w.client.post(QUERY, json={"query": query, "min_score": 0.0}, headers=headers)
    assert memory.status_code == 200, memory.text
    by_tool = {m["content"]: m for m in tool.json()["memories"]}
    by_query = {m["content"]: m for m in memory.json()["items"]}
    assert set(by_tool) <= set(by_query)  # the tool's floor only removes
    return by_query | by_tool


async def test_an_agent_never_sees_another_agents_memory(world: World) -> None:
    w, user = world, world.user("ada")
    await save(w, as_user(user, agent="support"), "The support ticket code is walrus-71")
    await save(w, as_user(user, agent="coder"), "The repository deploy key is osprey-22")
    await save(w, as_user(user), "The user prefers short answers in the morning")
    support = await found(w, as_user(user, agent="support"), "ticket code deploy key answers")
    coder = await found(w, as_user(user, agent="coder"), "ticket code deploy key answers")
    everything = await found(w, as_user(user), "ticket code deploy key answers")
    assert "The support ticket code is walrus-71" in support
    assert not [c for c in support if "osprey" in c]
    assert "The repository deploy key is osprey-22" in coder
    assert not [c for c in coder if "walrus" in c]
    # both see the user's unscoped memory (inherit, the default) ...
    for agent in ("support", "coder"):
        unscoped = await found(w, as_user(user, agent=agent), "does the user prefer short answers")
        assert "The user prefers short answers in the morning" in unscoped
    # ... and the user's own view is the whole memory
    assert {"walrus", "osprey"} <= {w for c in everything for w in ("walrus", "osprey") if w in c}


async def test_own_mode_reads_the_agents_memory_only(world: World) -> None:
    w, user = world, world.user("bea")
    await save(w, as_user(user, agent="planner"), "The planner's trip budget is 900 euros")
    await save(w, as_user(user), "The user's trip is to Porto in May")
    own = await found(w, as_user(user, agent="planner", mode="own"), "trip budget Porto May")
    assert "The planner's trip budget is 900 euros" in own
    assert not [c for c in own if "Porto" in c]


async def test_runs_are_kept_apart_and_see_the_unscoped_memory(world: World) -> None:
    w, user = world, world.user("cai")
    await save(w, as_user(user, run="r1"), "In this session the draft title is Blue Harbour")
    await save(w, as_user(user, run="r2"), "In this session the draft title is Red Canyon")
    r1 = await found(w, as_user(user, run="r1"), "what is the draft title")
    r2 = await found(w, as_user(user, run="r2"), "what is the draft title")
    assert [c for c in r1 if "Blue Harbour" in c] and not [c for c in r1 if "Red Canyon" in c]
    assert [c for c in r2 if "Red Canyon" in c] and not [c for c in r2 if "Blue Harbour" in c]


async def test_the_same_text_is_one_memory_per_scope(world: World) -> None:
    w, user = world, world.user("dov")
    a = await save(w, as_user(user, agent="a"), "The shared wifi password is lantern")
    b = await save(w, as_user(user, agent="b"), "The shared wifi password is lantern")
    assert a and b and a != b


async def test_an_agent_bound_key_cannot_act_as_another_agent(world: World) -> None:
    w, user = world, world.user("eve")
    r = await w.client.post(
        "/v1/admin/keys",
        json={"user_id": user, "agent_id": "mail"},
        headers={"Authorization": ADMIN},
    )
    assert r.status_code == 201, r.text
    assert r.json()["key"]["agent_id"] == "mail"
    token = r.json()["token"]
    key = {"Authorization": f"Bearer {token}"}
    await save(w, key, "The mail agent's signature is Kind regards, Eve")
    await save(w, as_user(user, agent="calendar"), "The calendar agent's default slot is 30 min")
    seen = await found(w, key, "signature default slot")
    assert [c for c in seen if "signature" in c] and not [c for c in seen if "30 min" in c]
    refused = await w.client.post(
        TOOL, json={"query": "slot"}, headers={**key, "X-Agent-Id": "calendar"}
    )
    assert refused.status_code == 403, refused.text
    # the key's own agent named again is fine
    same = await w.client.post(TOOL, json={"query": "slot"}, headers={**key, "X-Agent-Id": "mail"})
    assert same.status_code == 200


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({"X-Agent-Id": "has space"}, "header.X-Agent-Id"),
        ({"X-Run-Id": ""}, "header.X-Run-Id"),
        ({"X-Scope-Mode": "mine", "X-Agent-Id": "a"}, "X-Scope-Mode"),
        ({"X-Spaces": "Team"}, "header.X-Spaces"),
        ({"X-Spaces": ",".join(f"s{n}" for n in range(9))}, "header.X-Spaces"),
    ],
)
async def test_a_bad_scope_header_is_a_422_naming_it(
    world: World, headers: dict[str, str], field: str
) -> None:
    r = await world.client.post(
        TOOL, json={"query": "x"}, headers={**as_user(world.user("fay")), **headers}
    )
    assert r.status_code == 422, r.text
    assert field in r.text


async def admin(w: World, method: str, path: str, **kw: Any) -> httpx.Response:
    return await w.client.request(method, path, headers={"Authorization": ADMIN}, **kw)


async def test_spaces_read_and_write_grants(world: World) -> None:
    w = world
    space = f"team-{w.run}"
    writer, reader, outsider = w.user("gil"), w.user("hal"), w.user("ivo")
    assert (await admin(w, "POST", "/v1/admin/spaces", json={"id": space})).status_code == 201
    assert (await admin(w, "POST", "/v1/admin/spaces", json={"id": space})).status_code == 409
    for user, access in ((writer, "write"), (reader, "read")):
        r = await admin(
            w, "PUT", f"/v1/admin/spaces/{space}/members/{user}", json={"access": access}
        )
        assert r.status_code == 200, r.text
    saved = await w.client.post(
        f"/v1/spaces/{space}/memories",
        json={"content": "The team's on-call rotation starts on Mondays", "type": "fact"},
        headers=as_user(writer),
    )
    assert saved.status_code == 201, saved.text
    await save(w, as_user(writer), "Gil personally dislikes Monday meetings")
    # a read grant cannot write, a non-member neither
    for user in (reader, outsider):
        denied = await w.client.post(
            f"/v1/spaces/{space}/memories",
            json={"content": "sneaky", "type": "fact"},
            headers=as_user(user),
        )
        assert denied.status_code == 403, denied.text
    question = "when does the on-call rotation start"
    shared = await found(w, as_user(reader, spaces=space), question)
    item = shared["The team's on-call rotation starts on Mondays"]
    assert item["space"] == space
    tool = await w.client.post(
        TOOL, json={"query": question}, headers=as_user(reader, spaces=space)
    )
    assert f'space="{space}"' in tool.json()["formatted"]
    # a member's personal memory never reaches the space's readers
    assert not [c for c in shared if "Gil personally" in c]
    # without naming the space, the reader's own memory only
    assert not await found(w, as_user(reader), question)
    # a non-member naming the space reads nothing of it
    assert not await found(w, as_user(outsider, spaces=space), question)
    mine = await w.client.get("/v1/spaces", headers=as_user(reader))
    assert [(m["space_id"], m["access"]) for m in mine.json()["members"]] == [(space, "read")]
    # revoked: the next request reads nothing of the space
    gone = await admin(w, "DELETE", f"/v1/admin/spaces/{space}/members/{reader}")
    assert gone.status_code == 204
    assert not await found(w, as_user(reader, spaces=space), question)
    # the space deleted: its memories go with it, the writer's own stay
    assert (await admin(w, "DELETE", f"/v1/admin/spaces/{space}")).status_code == 204
    assert not await found(w, as_user(writer, spaces=space), question)
    own = await found(w, as_user(writer), "Monday meetings")
    assert "Gil personally dislikes Monday meetings" in own


async def test_user_ids_cannot_name_a_space(world: World) -> None:
    r = await world.client.post(TOOL, json={"query": "x"}, headers=as_user("space:team"))
    assert r.status_code == 422
    assert "space:" in r.text


async def test_a_space_with_nothing_relevant_changes_nothing(world: World) -> None:
    """One relevance scale: a space's best candidate is not "relevant" because it is the best
    of its own few (a ranking per space would report it at the top of its own scale)."""
    w = world
    space, user = f"office-{w.run}", w.user("jon")
    assert (await admin(w, "POST", "/v1/admin/spaces", json={"id": space})).status_code == 201
    r = await admin(w, "PUT", f"/v1/admin/spaces/{space}/members/{user}", json={"access": "write"})
    assert r.status_code == 200
    for text in ("The office plants are watered on Fridays", "Parking passes renew in January"):
        saved = await w.client.post(
            f"/v1/spaces/{space}/memories",
            json={"content": text, "type": "fact"},
            headers=as_user(user),
        )
        assert saved.status_code == 201
    for text in ("My sister's name is Clara", "I play the cello in an amateur orchestra"):
        await save(w, as_user(user), text)
    question = {"query": "What is my sister called?"}
    alone = await w.client.post(TOOL, json=question, headers=as_user(user))
    shared = await w.client.post(TOOL, json=question, headers=as_user(user, spaces=space))
    contents = [m["content"] for m in alone.json()["memories"]]
    assert contents and contents[0] == "My sister's name is Clara"
    assert [m["content"] for m in shared.json()["memories"]] == contents


async def test_a_tie_between_a_space_and_the_user_puts_the_users_own_first(world: World) -> None:
    w = world
    space, user = f"tie-{w.run}", w.user("kim")
    assert (await admin(w, "POST", "/v1/admin/spaces", json={"id": space})).status_code == 201
    r = await admin(w, "PUT", f"/v1/admin/spaces/{space}/members/{user}", json={"access": "write"})
    assert r.status_code == 200
    text = "The quarterly planning meeting is on the first Monday of the quarter"
    saved = await w.client.post(
        f"/v1/spaces/{space}/memories",
        json={"content": text, "type": "fact"},
        headers=as_user(user),
    )
    assert saved.status_code == 201
    own = await save(w, as_user(user), text)
    answer = await w.client.post(
        TOOL,
        json={"query": "When is the quarterly planning meeting?"},
        headers=as_user(user, spaces=space),
    )
    memories = answer.json()["memories"]
    assert [m["content"] for m in memories[:2]] == [text, text]
    assert memories[0]["id"] == own and memories[0]["space"] is None
    assert memories[1]["space"] == space


async def test_turns_of_an_agents_conversation_stay_the_agents(world: World) -> None:
    """A turn appended without an agent to a conversation an agent started is that agent's:
    another agent finds neither the conversation nor the turn."""
    w, user = world, world.user("lea")
    created = await w.client.post("/v1/conversations", json={}, headers=as_user(user, agent="a"))
    assert created.status_code == 201
    cid = created.json()["id"]
    appended = await w.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "user", "content": "My locker at the pool is number 58"},
        headers=as_user(user),
    )
    assert appended.status_code == 201, appended.text
    question = "What is my locker number at the pool?"
    as_a = await found(w, as_user(user, agent="a"), question)
    as_b = await found(w, as_user(user, agent="b"), question)
    assert "My locker at the pool is number 58" in as_a
    assert not [c for c in as_b if "58" in c]
    other = await w.client.get(f"/v1/conversations/{cid}", headers=as_user(user, agent="b"))
    assert other.status_code == 404


async def test_an_agents_cached_answer_is_not_served_to_the_agent_reading_a_space(
    world: World,
) -> None:
    """The agent's answer is cached (Redis); the same question from the same agent naming a
    space reads the space, not that answer."""
    w = world
    space, user = f"cache-{w.run}", w.user("max")
    assert (await admin(w, "POST", "/v1/admin/spaces", json={"id": space})).status_code == 201
    r = await admin(w, "PUT", f"/v1/admin/spaces/{space}/members/{user}", json={"access": "write"})
    assert r.status_code == 200
    await save(w, as_user(user, agent="a"), "I water the office ferns on Tuesdays")
    shared = await w.client.post(
        f"/v1/spaces/{space}/memories",
        json={"content": "The office ferns are repotted every spring", "type": "fact"},
        headers=as_user(user),
    )
    assert shared.status_code == 201
    question = {"query": "What do we do with the office ferns?", "min_score": 0.0}
    for _ in range(2):  # the second is the cached answer
        alone = await w.client.post(QUERY, json=question, headers=as_user(user, agent="a"))
    assert all(i["space"] is None for i in alone.json()["items"])
    both = await w.client.post(QUERY, json=question, headers=as_user(user, agent="a", spaces=space))
    assert "The office ferns are repotted every spring" in [
        i["content"] for i in both.json()["items"]
    ]
