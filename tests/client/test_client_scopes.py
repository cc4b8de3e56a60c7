"""Memory scopes through the client (issue 43, docs/agents.md): a client made with an agent, a
run, a mode and spaces sends them on every call for the user, an agent-bound key and the
spaces' admin and member calls; the isolation rules of tests/api/test_memory_scopes.py, seen
through pgrecall.client."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from pgrecall.client import AsyncClient, Client, PgrecallError

KEYS = {"api_key": SecretStr("svc-key"), "admin_api_key": SecretStr("adm-key")}


@pytest.fixture
def world(make_client: Callable[..., Any]) -> Callable[..., Any]:
    """`async with world() as pgr:` a service client (service and admin keys) on a fresh app."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[AsyncClient]:
        async with make_client(write_rate_limit_per_minute=0, **KEYS) as (http, _):
            yield AsyncClient("http://test", api_key="svc-key", admin_key="adm-key", http=http)

    return factory


def contents(result: Any) -> set[str]:
    return {m.content for m in result.memories}


async def test_agents_runs_and_own_mode(world: Callable[..., Any]) -> None:
    async with world() as base:
        pgr = base.as_user(f"ada-{uuid.uuid4().hex[:8]}")
        support, coder = pgr.scoped(agent_id="support"), pgr.scoped(agent_id="coder")
        await support.save_memory("The support ticket code is walrus-71", "fact")
        await coder.save_memory("The repository deploy key is osprey-22", "fact")
        await pgr.save_memory("The user prefers short answers in the morning", "preference")
        question = "ticket code deploy key short answers"
        seen_by_support = contents(await support.query_memory(question))
        assert "The support ticket code is walrus-71" in seen_by_support
        assert not [c for c in seen_by_support if "osprey" in c]
        assert not [c for c in contents(await coder.query_memory(question)) if "walrus" in c]
        # inherit (the default) reads the user's unscoped memory, own does not
        answers = "does the user prefer short answers"
        assert [c for c in contents(await support.query_memory(answers)) if "short" in c]
        own = support.scoped(agent_id="support", scope_mode="own")
        assert not [c for c in contents(await own.query_memory(answers)) if "short" in c]
        # the user's whole memory holds both agents'
        whole = {i.content for i in (await pgr.memory_query(question, min_score=0.0)).items}
        assert {"walrus", "osprey"} <= {w for c in whole for w in ("walrus", "osprey") if w in c}
        # conversations are the agent's too
        conv = await support.create_conversation("support chat")
        with pytest.raises(PgrecallError) as hidden:
            await coder.get_conversation(conv.id)
        assert hidden.value.status == 404
        # runs of one agent are kept apart
        r1, r2 = pgr.scoped(run_id="r1"), pgr.scoped(run_id="r2")
        await r1.save_memory("In this session the draft title is Blue Harbour", "note")
        assert not contents(await r2.query_memory("what is the draft title Blue Harbour")) & {
            "In this session the draft title is Blue Harbour"
        }


async def test_the_scope_rides_on_user_calls_only(make_client: Callable[..., Any]) -> None:
    sent: list[httpx.Request] = []

    async with make_client(**KEYS) as (http, _):
        http.event_hooks["request"].append(lambda request: _record(sent, request))
        pgr = AsyncClient(
            "http://test",
            user_id="u1",
            api_key="svc-key",
            admin_key="adm-key",
            http=http,
            agent_id="a1",
            run_id="r1",
            scope_mode="own",
            spaces="team,home",
        )
        await pgr.query_memory("anything")
        await pgr.list_spaces()
        other = pgr.as_user("u2")
        await other.list_conversations()
    user_call, admin_call, other_call = sent
    assert user_call.headers["X-Agent-Id"] == "a1" and user_call.headers["X-Run-Id"] == "r1"
    assert user_call.headers["X-Scope-Mode"] == "own"
    assert user_call.headers["X-Spaces"] == "team,home"
    assert not {"x-agent-id", "x-user-id", "x-spaces"} & set(admin_call.headers)
    assert other_call.headers["X-User-Id"] == "u2" and other_call.headers["X-Agent-Id"] == "a1"
    with pytest.raises(ValueError, match="scope_mode"):
        AsyncClient("http://test", scope_mode="mine")


async def _record(sent: list[httpx.Request], request: httpx.Request) -> None:
    sent.append(request)


async def test_a_bad_scope_is_the_services_422_naming_the_header(
    world: Callable[..., Any],
) -> None:
    async with world() as base:
        pgr = base.as_user("u1").scoped(agent_id="has space")
        with pytest.raises(PgrecallError) as bad:
            await pgr.query_memory("x")
        assert bad.value.status == 422
        assert bad.value.fields and bad.value.fields[0]["field"] == "header.X-Agent-Id"


async def test_an_agent_bound_key(world: Callable[..., Any]) -> None:
    async with world() as base:
        user = f"eve-{uuid.uuid4().hex[:8]}"
        created = await base.create_key(user, agent_id="mail")
        assert created.key.agent_id == "mail"
        listed = await base.list_keys(user)
        assert [k.agent_id for k in listed.items] == ["mail"]
        mail = AsyncClient("http://test", api_key=created.token, http=base._http)
        await mail.save_memory("The mail agent's signature is Kind regards, Eve", "fact")
        await (
            base.as_user(user)
            .scoped(agent_id="calendar")
            .save_memory("The calendar agent's default slot is 30 min", "fact")
        )
        seen = contents(await mail.query_memory("signature default slot"))
        assert [c for c in seen if "signature" in c] and not [c for c in seen if "30 min" in c]
        with pytest.raises(PgrecallError) as refused:
            await mail.scoped(agent_id="calendar").query_memory("slot")
        assert refused.value.status == 403


async def test_spaces_grants_through_the_client(world: Callable[..., Any]) -> None:
    async with world() as admin:
        space = f"team-{uuid.uuid4().hex[:8]}"
        writer, reader, outsider = (f"{n}-{uuid.uuid4().hex[:8]}" for n in ("gil", "hal", "ivo"))
        made = await admin.create_space(space, description="the on-call team")
        assert (made.id, made.description) == (space, "the on-call team")
        assert space in [s.id for s in await admin.list_spaces()]
        await admin.grant_space(space, writer, "write")
        member = await admin.grant_space(space, reader, "read")
        assert (member.user_id, member.access) == (reader, "read")
        members = await admin.space_members(space)
        assert [(m.user_id, m.access) for m in members] == sorted(
            [(writer, "write"), (reader, "read")]
        )
        w = admin.as_user(writer)
        saved = await w.save_to_space(
            space, "The team's on-call rotation starts on Mondays", "fact"
        )
        assert saved.action == "added"
        await w.save_memory("Gil personally dislikes Monday meetings", "preference")
        # a read grant cannot write, a non-member neither
        for user in (reader, outsider):
            with pytest.raises(PgrecallError) as denied:
                await admin.as_user(user).save_to_space(space, "sneaky", "fact")
            assert denied.value.status == 403
        question = "when does the on-call rotation start"
        r = admin.as_user(reader).scoped(spaces=[space])
        shared = await r.query_memory(question)
        (item,) = [m for m in shared.memories if "on-call" in m.content]
        assert item.space == space and f'space="{space}"' in shared.formatted
        items = (await r.memory_query(question, min_score=0.0)).items
        assert [i.space for i in items if "on-call" in i.content] == [space]
        assert not [i for i in items if "Gil personally" in i.content]
        assert [(m.space_id, m.access) for m in await r.my_spaces()] == [(space, "read")]
        # a non-member naming the space reads nothing of it
        nothing = (
            await admin.as_user(outsider)
            .scoped(spaces=[space])
            .memory_query(question, min_score=0.0)
        )
        assert not [i for i in nothing.items if "on-call" in i.content]
        # revoked: the next call reads nothing of the space
        await admin.revoke_space(space, reader)
        after = await r.memory_query(question, min_score=0.0)
        assert not [i for i in after.items if "on-call" in i.content]
        assert await r.my_spaces() == []
        with pytest.raises(PgrecallError) as gone:
            await admin.revoke_space(space, reader)
        assert gone.value.status == 404
        await admin.delete_space(space)
        assert space not in [s.id for s in await admin.list_spaces()]


def test_the_sync_client_has_the_scope_and_space_methods() -> None:
    names = ("create_space", "list_spaces", "delete_space", "space_members", "grant_space")
    names += ("revoke_space", "my_spaces", "save_to_space")
    for name in names:
        assert callable(getattr(Client, name)) and callable(getattr(AsyncClient, name))
    with Client("http://127.0.0.1:9", user_id="u", agent_id="a", spaces=["s"]) as pgr:
        view = pgr.scoped(run_id="r")
        assert (view.agent_id, view.run_id, view.spaces, view.user_id) == (None, "r", (), "u")
        assert pgr.as_user("v")._scope() == {
            "agent_id": "a",
            "run_id": None,
            "scope_mode": None,
            "spaces": ("s",),
        }
