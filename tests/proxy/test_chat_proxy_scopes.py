"""Memory scopes through the chat proxy (issue 43, docs/agents.md): X-Agent-Id, X-Run-Id,
X-Scope-Mode and X-Spaces on /v1/chat/completions decide which memories reach the upstream
model and whose the stored turns are; a scripted upstream (tests/proxy/upstream_server.py)
shows what the proxy sent."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.helpers import make_key, shared_space
from tests.proxy.upstream_server import Answer, Upstream

CHAT = "/v1/chat/completions"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


def ask(question: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}]}


def injected(upstream: Upstream) -> str:
    """The memory block the proxy put before the user's turn in its last upstream request."""
    return "\n".join(
        str(m["content"])
        for m in upstream.seen[-1].body["messages"]
        if m["role"] == "system" and "<memories>" in str(m["content"])
    )


async def save(client: httpx.AsyncClient, headers: dict[str, str], content: str) -> None:
    r = await client.post(
        "/v1/tools/save_memory", json={"content": content, "type": "fact"}, headers=headers
    )
    assert r.status_code == 200, r.text


async def chat(
    client: httpx.AsyncClient, upstream: Upstream, headers: dict[str, str], question: str
) -> httpx.Response:
    upstream.answers.append(Answer(text="noted"))
    r = await client.post(CHAT, json=ask(question), headers=headers)
    assert r.status_code == 200, r.text
    return r


async def test_an_agent_never_gets_another_agents_memory_or_turns(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    support = {"X-User-Id": user_id, "X-Agent-Id": "support"}
    sales = {"X-User-Id": user_id, "X-Agent-Id": "sales"}
    async with make_client(chat_upstream_url=upstream.base) as (client, app):
        await save(client, support, "The support ticket code is walrus-71")
        await save(client, {"X-User-Id": user_id}, "The user's name is Ada Lovelace")
        await chat(client, upstream, support, "What is my ticket code?")
        assert "walrus-71" in injected(upstream)
        answered = await chat(client, upstream, sales, "What is my name and my ticket code?")
        assert "walrus-71" not in injected(upstream)
        assert "Ada Lovelace" in injected(upstream)  # the user's unscoped memory (inherit)
        own = {**sales, "X-Scope-Mode": "own"}
        await chat(client, upstream, own, "What is my name, Ada Lovelace?")
        assert "Ada Lovelace" not in injected(upstream)
        # the turns stored are the sales agent's: the support agent cannot read them
        conversation = answered.headers["x-pgrecall-conversation-id"]
        path = f"/v1/conversations/{conversation}/messages"
        assert (await client.get(path, headers=support)).status_code == 404
        mine = await client.get(path, headers=sales)
        assert mine.status_code == 200 and mine.json()["items"][0]["content"].startswith("What")
        # a key bound to the support agent cannot chat as another agent
        token = (await make_key(app, user_id, agent_id="support")).token
        bound = {"X-Pgrecall-Key": token}
        upstream.answers.append(Answer(text="noted"))
        refused = await client.post(CHAT, json=ask("hi"), headers={**bound, "X-Agent-Id": "sales"})
        assert refused.status_code == 403, refused.text
        await chat(client, upstream, bound, "Which support ticket code is walrus?")
        assert "walrus-71" in injected(upstream)
        bad = await client.post(
            CHAT, json=ask("hi"), headers={"X-User-Id": user_id, "X-Scope-Mode": "mine"}
        )
        assert bad.status_code == 422 and "X-Scope-Mode" in bad.text


async def test_spaces_through_the_proxy(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str, other_user_id: str
) -> None:
    space = f"team-{uuid.uuid4().hex[:8]}"
    writer = f"writer-{uuid.uuid4()}"
    question = "When does the on-call rotation start?"
    async with make_client(chat_upstream_url=upstream.base) as (client, _):
        await shared_space(
            client,
            space,
            {writer: "write", user_id: "read"},
            writer=writer,
            content="The team's on-call rotation starts on Mondays",
        )
        reader = {"X-User-Id": user_id, "X-Spaces": space}
        await chat(client, upstream, reader, question)
        assert "rotation starts on Mondays" in injected(upstream)
        assert f'space="{space}"' in injected(upstream)
        # the reader's turn is the reader's own, never the space's (a read grant cannot write)
        as_writer = await client.post(
            "/v1/memory/query",
            json={"query": "on-call rotation start", "min_score": 0.0},
            headers={"X-User-Id": writer, "X-Spaces": space},
        )
        assert not [i for i in as_writer.json()["items"] if i["content"] == question]
        # a non-member naming the space gets nothing of it
        await chat(client, upstream, {"X-User-Id": other_user_id, "X-Spaces": space}, question)
        assert "rotation starts on Mondays" not in injected(upstream)
        # revoked: the next request gets nothing of the space
        gone = await client.delete(f"/v1/admin/spaces/{space}/members/{user_id}")
        assert gone.status_code == 204
        await chat(client, upstream, reader, question)
        assert "rotation starts on Mondays" not in injected(upstream)
