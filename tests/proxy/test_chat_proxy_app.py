"""The chat proxy's own rules on the app (ASGI): off by default, input checks, which key is
whose, an unreachable upstream."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from tests.proxy.upstream_server import Answer, Upstream
from tests.served import free_port

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


async def test_off_without_an_upstream_url(make_client: Callable[..., Any], user_id: str) -> None:
    async with make_client() as (client, _):
        response = await client.post(CHAT, json=BODY, headers={"X-User-Id": user_id})
    assert response.status_code == 501
    assert response.json()["error"] == "UpstreamError"
    assert "PGRECALL_CHAT_UPSTREAM_URL" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "m", "messages": []}, "body.messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, "body.model"),
        ({**BODY, "memory": {"top_k": 0}}, "body.memory.top_k"),
        ({**BODY, "memory": {"top_k": "3"}}, "body.memory.top_k"),
        ({**BODY, "memory": {"conversation_id": "nope"}}, "body.memory.conversation_id"),
        ({**BODY, "memory": {"surprise": 1}}, "body.memory.surprise"),
        ({"model": "m", "messages": [{"role": "user", "content": " \n"}]}, "body.messages.0"),
        ({"model": "m", "messages": [{"role": "boss", "content": "x"}]}, "body.messages.0.role"),
    ],
)
async def test_invalid_requests_are_422_naming_the_field(
    make_client: Callable[..., Any],
    upstream: Upstream,
    user_id: str,
    body: dict[str, Any],
    field: str,
) -> None:
    async with make_client(chat_upstream_url=upstream.base) as (client, _):
        response = await client.post(CHAT, json=body, headers={"X-User-Id": user_id})
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"].startswith(field)
    assert upstream.seen == []


async def test_service_key_travels_in_its_own_header(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    keys = {"api_key": SecretStr("svc"), "chat_upstream_url": upstream.base}
    caller = {"X-User-Id": user_id, "Authorization": "Bearer sk-caller"}
    async with make_client(**keys) as (client, _):
        missing = await client.post(CHAT, json=BODY, headers=caller)
        wrong = await client.post(CHAT, json=BODY, headers={**caller, "X-Pgrecall-Key": "x"})
        ok = await client.post(CHAT, json=BODY, headers={**caller, "X-Pgrecall-Key": "svc"})
    assert (missing.status_code, wrong.status_code, ok.status_code) == (401, 403, 200)
    assert [s.headers["authorization"] for s in upstream.seen] == ["Bearer sk-caller"]


async def test_configured_upstream_key_replaces_the_callers(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    settings = {
        "api_key": SecretStr("svc"),
        "chat_upstream_url": upstream.base,
        "chat_upstream_key": SecretStr("sk-configured"),
    }
    async with make_client(**settings) as (client, _):
        # Authorization does not go upstream now, so it may carry the service key.
        ok = await client.post(
            CHAT, json=BODY, headers={"X-User-Id": user_id, "Authorization": "Bearer svc"}
        )
        denied = await client.post(
            CHAT, json=BODY, headers={"X-User-Id": user_id, "Authorization": "Bearer sk-other"}
        )
    assert (ok.status_code, denied.status_code) == (200, 403)
    assert [s.headers["authorization"] for s in upstream.seen] == ["Bearer sk-configured"]


async def test_unreachable_upstream_is_502_and_stores_nothing(
    make_client: Callable[..., Any], user_id: str
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    async with make_client(chat_upstream_url=dead) as (client, _):
        response = await client.post(CHAT, json=BODY, headers={"X-User-Id": user_id})
        listed = await client.get("/v1/conversations", headers={"X-User-Id": user_id})
    assert response.status_code == 502 and response.json()["error"] == "UpstreamError"
    assert listed.json()["items"] == []


async def test_tool_call_round_is_stored_as_messages_without_a_second_user_turn(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    upstream.answers.extend([Answer(text="Calling a tool"), Answer(text="It is 12:00.")])
    headers = {"X-User-Id": user_id}
    call = {"id": "c1", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
    async with make_client(chat_upstream_url=upstream.base) as (client, _):
        first = await client.post(
            CHAT,
            json={"model": "m", "messages": [{"role": "user", "content": "What time is it?"}]},
            headers=headers,
        )
        cid = first.headers["x-pgrecall-conversation-id"]
        await client.post(
            CHAT,
            json={
                "model": "m",
                "messages": [
                    {"role": "user", "content": "What time is it?"},
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
                ],
                "memory": {"conversation_id": cid},
            },
            headers=headers,
        )
        messages = await client.get(f"/v1/conversations/{cid}/messages", headers=headers)
    items = messages.json()["items"]
    assert [m["content"] for m in items] == [
        "What time is it?",
        "Calling a tool",
        "Tool call: clock({})",
        "Tool clock returned: 12:00",
        "It is 12:00.",
    ]
    assert items[2]["metadata"]["tool_calls"] == [{"id": "c1", "name": "clock"}]
    assert items[3]["metadata"] == {"source": "chat_proxy", "tool": "clock", "tool_call_id": "c1"}
    assert upstream.seen[1].body["messages"][-1]["tool_call_id"] == "c1"  # passed through


async def test_a_named_user_message_is_stored_with_its_speaker(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    """OpenAI's `name` on a message (a participant of a group chat) becomes metadata.speaker,
    which the ranking's named-speaker stage reads; an odd name is not stored."""
    upstream.answers.extend([Answer(text="Noted."), Answer(text="Noted too.")])
    headers = {"X-User-Id": user_id}
    async with make_client(chat_upstream_url=upstream.base) as (client, _):
        first = await client.post(
            CHAT,
            json={"model": "m", "messages": [{"role": "user", "name": "Tim", "content": "Hi"}]},
            headers=headers,
        )
        cid = first.headers["x-pgrecall-conversation-id"]
        await client.post(
            CHAT,
            json={
                "model": "m",
                "messages": [{"role": "user", "name": ["x"], "content": "Again"}],
                "memory": {"conversation_id": cid},
            },
            headers=headers,
        )
        messages = await client.get(f"/v1/conversations/{cid}/messages", headers=headers)
    items = messages.json()["items"]
    assert items[0]["metadata"] == {"source": "chat_proxy", "speaker": "Tim"}
    assert "speaker" not in items[2]["metadata"]
    assert upstream.seen[0].body["messages"][0]["name"] == "Tim"  # forwarded as sent
