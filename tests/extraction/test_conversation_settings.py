"""Per-conversation extraction (PATCH /v1/conversations/{id}) and the rolling conversation
summary the worker keeps (GET .../session, the chat proxy's `memory.summary`), over HTTP
against the real app, Postgres and Redis, with the scripted model server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from app.retrieval.budget import count_tokens
from tests.extraction.conftest import Env, fact, facts
from tests.helpers import headers, new_conversation
from tests.proxy.upstream_server import Answer, Upstream

USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


async def _append(client: httpx.AsyncClient, user: str, cid: str, role: str, text: str) -> None:
    r = await client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": role, "content": text},
        headers=headers(user),
    )
    assert r.status_code == 201, r.text


async def _patch(client: httpx.AsyncClient, user: str, cid: str, body: Any) -> httpx.Response:
    return await client.patch(f"/v1/conversations/{cid}", json=body, headers=headers(user))


async def _session(client: httpx.AsyncClient, user: str, cid: str) -> dict[str, Any]:
    r = await client.get(f"/v1/conversations/{cid}/session", headers=headers(user))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def _queued(env: Env, user: str) -> list[str]:
    return [str(j.message_id) for j in await env.jobs(user)]


async def test_a_conversation_switches_extraction_on_over_a_default_of_off(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env(extraction_default=False) as env:
        plain = await new_conversation(env.client, user_id)
        elephant = await new_conversation(env.client, user_id)
        got = (await env.client.get(f"/v1/conversations/{plain}", headers=headers(user_id))).json()
        assert (got["extraction"], got["extraction_active"]) == (None, False)
        r = await _patch(env.client, user_id, elephant, {"extraction": True})
        assert r.status_code == 200, r.text
        assert (r.json()["extraction"], r.json()["extraction_active"]) == (True, True)
        assert r.json()["title"] is None  # untouched fields stay
        await _append(env.client, user_id, plain, "user", "I keep bees in my garden")
        await _append(env.client, user_id, elephant, "user", "I play the cello on Sundays")
        jobs = await env.jobs(user_id)
        assert [str(j.conversation_id) for j in jobs] == [elephant]
        # The model is asked about the elephant conversation's turn only.
        env.script(Answer(text=facts(fact("User plays the cello on Sundays.", "t1"))))
        assert [r.state for r in await env.drain()] == ["done"]
        assert [m.content for m in await env.memories(user_id)] == [
            "User plays the cello on Sundays."
        ]
        # null follows the service default again: off.
        r = await _patch(env.client, user_id, elephant, {"extraction": None})
        assert (r.json()["extraction"], r.json()["extraction_active"]) == (None, False)
        await _append(env.client, user_id, elephant, "user", "I also keep a small vegetable patch")
        assert len(await env.jobs(user_id)) == 1


async def test_a_conversation_switches_extraction_off_over_a_default_of_on(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env() as env:
        quiet = await new_conversation(env.client, user_id)
        r = await _patch(env.client, user_id, quiet, {"extraction": False, "title": "private"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["extraction"], body["extraction_active"], body["title"]) == (
            False,
            False,
            "private",
        )
        await _append(env.client, user_id, quiet, "user", "My bank PIN hint is my cat's name")
        assert await env.jobs(user_id) == []
        listed = await env.client.get("/v1/conversations", headers=headers(user_id))
        assert listed.json()["items"][0]["extraction"] is False


async def test_patch_validates_and_is_scoped_to_the_user(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env() as env:
        cid = await new_conversation(env.client, user_id)
        for bad, field in (
            ({"extraction": "yes"}, "extraction"),
            ({"extraction": 1}, "extraction"),
            ({"elephant": True}, "elephant"),
            ({}, "body"),
        ):
            r = await _patch(env.client, user_id, cid, bad)
            assert r.status_code == 422, (bad, r.text)
            assert field in r.text
        other = await _patch(env.client, f"{user_id}-other", cid, {"extraction": True})
        assert other.status_code == 404
        got = await env.client.get(f"/v1/conversations/{cid}", headers=headers(user_id))
        assert got.json()["extraction"] is None  # the other user changed nothing


async def test_without_an_extraction_model_the_setting_is_kept_but_nothing_runs(
    make_client: Callable[..., Any], make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, _):  # PGRECALL_EXTRACTION off
        cid = await new_conversation(client, user_id)
        r = await _patch(client, user_id, cid, {"extraction": True})
        assert (r.json()["extraction"], r.json()["extraction_active"]) == (True, False)
        await _append(client, user_id, cid, "user", "I run marathons")
        state = await _session(client, user_id, cid)
        assert (state["summary"], state["summary_state"]) == (None, "no_llm")
    async with make_env() as env:
        assert await env.jobs(user_id) == []  # nothing was queued while there was no model


async def test_the_worker_keeps_a_bounded_rolling_summary(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env(extraction_summary_tokens=40) as env:
        cid = await new_conversation(env.client, user_id)
        assert (await _session(env.client, user_id, cid))["summary_state"] == "current"
        await _append(env.client, user_id, cid, "user", "Help me plan a trip to Kyoto in April")
        await _append(env.client, user_id, cid, "assistant", "Book the ryokan early for April.")
        state = await _session(env.client, user_id, cid)
        assert (state["summary"], state["summary_state"]) == (None, "pending")

        env.script(
            Answer(text=facts()),  # extraction: nothing to keep
            Answer(text="The user plans an April trip to Kyoto.", usage=USAGE),
        )
        assert [r.state for r in await env.drain()] == ["done"]
        state = await _session(env.client, user_id, cid)
        assert state["summary"] == "The user plans an April trip to Kyoto."
        assert state["summary_state"] == "current" and state["summary_updated_at"]
        first = env.upstream.seen[-1].body
        assert "response_format" not in first and first["max_completion_tokens"] == 40
        shown = first["messages"][1]["content"]
        assert "(none)" in shown and "[assistant] Book the ryokan early" in shown

        # The next turn is folded into the previous summary; an answer over the limit is cut.
        await _append(env.client, user_id, cid, "user", "Also find a vegetarian restaurant")
        assert (await _session(env.client, user_id, cid))["summary_state"] == "pending"
        env.script(Answer(text=facts()), Answer(text="Kyoto trip, vegetarian food. " * 40))
        await env.drain()
        second = env.upstream.seen[-1].body["messages"][1]["content"]
        assert "The user plans an April trip to Kyoto." in second
        assert "Help me plan" not in second  # only the turns since the last summary
        state = await _session(env.client, user_id, cid)
        assert state["summary"].startswith("Kyoto trip, vegetarian food.")
        assert count_tokens(state["summary"]) <= 40
        assert state["summary_state"] == "current"


async def test_a_failed_summary_call_stores_nothing_and_the_next_batch_covers_it(
    make_env: Callable[..., Any], user_id: str
) -> None:
    async with make_env(extraction_summary_tokens=40) as env:
        cid = await new_conversation(env.client, user_id)
        await _append(env.client, user_id, cid, "user", "I am learning Portuguese")
        env.script(Answer(text=facts()), Answer(status=500, error={"error": {"message": "x"}}))
        assert [r.state for r in await env.drain()] == ["done"]  # the batch itself stands
        state = await _session(env.client, user_id, cid)
        assert (state["summary"], state["summary_state"]) == (None, "pending")
        await _append(env.client, user_id, cid, "user", "Mostly for a move to Porto")
        env.script(Answer(text=facts()), Answer(text="Learning Portuguese for a move to Porto."))
        await env.drain()
        shown = env.upstream.seen[-1].body["messages"][1]["content"]
        assert "I am learning Portuguese" in shown and "move to Porto" in shown
        state = await _session(env.client, user_id, cid)
        assert state["summary_state"] == "current"


async def test_the_proxy_injects_the_summary_when_asked(
    make_env: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    async with make_env(extraction_summary_tokens=40, chat_upstream_url=upstream.base) as env:
        cid = await new_conversation(env.client, user_id)
        await _append(env.client, user_id, cid, "user", "We are choosing a database for the shop")
        env.script(Answer(text=facts()), Answer(text="Choosing a database for an online shop."))
        await env.drain()
        for stream in (False, True):
            env.script(
                Answer(text="Postgres.") if not stream else Answer(stream_pieces=["Post", "gres."])
            )
            r = await env.client.post(
                "/v1/chat/completions",
                json={
                    "model": "m",
                    "stream": stream,
                    "messages": [{"role": "user", "content": "Which one again?"}],
                    "memory": {"conversation_id": cid, "summary": True, "off": True},
                },
                headers=headers(user_id),
            )
            assert r.status_code == 200, r.text
            assert r.headers["x-pgrecall-summary"] == "included"
            sent = env.upstream.seen[-1].body["messages"]
            assert sent[0]["role"] == "system"
            assert sent[0]["content"].startswith("<conversation_summary>")
            assert "Choosing a database for an online shop." in sent[0]["content"]
            assert sent[1] == {"role": "user", "content": "Which one again?"}
        # Not asked: no summary goes upstream.
        env.script(Answer(text="ok"))
        r = await env.client.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "thanks"}],
                "memory": {"conversation_id": cid, "off": True},
            },
            headers=headers(user_id),
        )
        assert "x-pgrecall-summary" not in r.headers
        assert "<conversation_summary>" not in str(env.upstream.seen[-1].body)
