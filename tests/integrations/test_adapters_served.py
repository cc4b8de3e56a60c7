"""The framework adapters, used through the frameworks' own objects, against a real
`pgrecall serve` process: a LangGraph graph and the store's public methods; an OpenAI Agents
SDK Runner whose model is a real chat completions server started by the test
(tests/proxy/upstream_server.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypedDict

import pytest
from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
from agents.memory import Session
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, Item, SearchItem
from openai import AsyncOpenAI

from pgrecall.agents_session import PgrecallSession
from pgrecall.client import AsyncClient, Client, PgrecallError
from pgrecall.langgraph_store import PgrecallStore
from tests.proxy.upstream_server import Answer, Upstream
from tests.served import Served, serving


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving("pgr-adapters-") as server:
        yield server


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


@pytest.fixture
def user() -> str:
    return f"adapter-{uuid.uuid4()}"


@pytest.fixture
def store(served: Served, user: str) -> Iterator[PgrecallStore]:
    pgr = PgrecallStore(served.base, user_id=user)
    yield pgr
    pgr.close()


# -- LangGraph ------------------------------------------------------------------------------


def test_store_public_methods(store: PgrecallStore) -> None:
    assert isinstance(store, BaseStore)
    ns = ("memories", "preference")
    store.put(ns, "editor", {"content": "Prefers Helix over Vim"})
    store.put(ns, "shell", {"content": "Uses fish as the shell", "tags": ["cli"]})
    store.put(("memories", "fact"), "city", {"content": "Lives in Porto"})

    item = store.get(ns, "editor")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (
        ns,
        "editor",
        {"content": "Prefers Helix over Vim"},
    )
    store.put(ns, "editor", {"content": "Prefers the Zed editor now"})
    replaced = store.get(ns, "editor")
    assert replaced is not None and replaced.value == {"content": "Prefers the Zed editor now"}
    assert replaced.created_at == item.created_at and replaced.updated_at > item.updated_at

    hits = store.search(("memories",), query="which text editor?", limit=2)
    assert all(isinstance(h, SearchItem) for h in hits)
    assert hits[0].key == "editor" and hits[0].score is not None
    assert [h.key for h in store.search(ns, filter={"tags": ["cli"]})] == ["shell"]
    assert [
        h.key for h in store.search(ns, filter={"content": {"$eq": "Uses fish as the shell"}})
    ] == ["shell"]

    assert store.list_namespaces() == [("memories", "fact"), ("memories", "preference")]
    assert store.list_namespaces(suffix=("fact",)) == [("memories", "fact")]
    assert store.list_namespaces(max_depth=1) == [("memories",)]

    store.delete(ns, "editor")
    assert store.get(ns, "editor") is None
    with pytest.raises(ValueError):  # LangGraph's own rule, checked before any request
        store.put(("a.b",), "k", {"v": 1})


async def test_store_async_methods_and_memory_recall(
    store: PgrecallStore, served: Served, user: str
) -> None:
    await store.aput(("notes",), "trip", {"text": "Flight to Reykjavik on 12 March"})
    got = await store.aget(("notes",), "trip")
    assert got is not None and got.value["text"].startswith("Flight")
    assert [h.key for h in await store.asearch(("notes",), query="when do I fly?")] == ["trip"]
    assert await store.alist_namespaces() == [("notes",)]
    # The item is one of the user's memories: query_memory finds it.
    async with AsyncClient(served.base, user_id=user) as pgr:
        found = await pgr.query_memory("when is the flight to Iceland?")
    assert found.memories[0].content == "Flight to Reykjavik on 12 March"
    assert found.memories[0].type == "note"
    await store.adelete(("notes",), "trip")
    assert await store.aget(("notes",), "trip") is None
    await store.aclose()


class State(TypedDict):
    said: str
    recalled: list[str]


def test_a_compiled_graph_uses_the_store(served: Served, user: str) -> None:
    def remember(state: State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        runtime.store.put(("memories", "fact"), str(len(state["said"])), {"content": state["said"]})
        return {}

    def recall(state: State, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        hits = runtime.store.search(("memories",), query="pets", limit=1)
        return {"recalled": [h.value["content"] for h in hits]}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    with Client(served.base, user_id=user) as pgr:
        graph = builder.compile(store=PgrecallStore(client=pgr))
        out = graph.invoke({"said": "I have a greyhound called Pixel", "recalled": []})
        assert out["recalled"] == ["I have a greyhound called Pixel"]
    # Another user's store over the same service sees nothing of it.
    other = PgrecallStore(served.base, user_id=f"other-{uuid.uuid4()}")
    assert other.search(("memories",)) == [] and other.list_namespaces() == []
    assert other.get(("memories", "fact"), "31") is None
    other.close()


# -- OpenAI Agents SDK ------------------------------------------------------------------------


@pytest.fixture
async def model_client(upstream: Upstream) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(base_url=upstream.base, api_key="sk-test")
    yield client
    await client.close()  # its pooled connection would otherwise be collected in a later test


def _agent(client: AsyncOpenAI) -> Agent[Any]:
    model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=client)
    return Agent(name="Assistant", instructions="Be brief.", model=model)


RUN = RunConfig(tracing_disabled=True)


async def test_runner_keeps_history_in_the_session(
    served: Served, upstream: Upstream, model_client: AsyncOpenAI, user: str
) -> None:
    session = await PgrecallSession.start(served.base, user_id=user, title="agents")
    assert isinstance(session, Session)
    agent = _agent(model_client)
    upstream.answers.extend([Answer(text="Hello Ana."), Answer(text="Your name is Ana.")])

    first = await Runner.run(agent, "My name is Ana.", session=session, run_config=RUN)
    assert first.final_output == "Hello Ana."
    second = await Runner.run(agent, "What is my name?", session=session, run_config=RUN)
    assert second.final_output == "Your name is Ana."
    sent = upstream.seen[-1].body["messages"]
    contents = [m.get("content") for m in sent]
    assert "My name is Ana." in contents and "Hello Ana." in str(contents)  # history went upstream

    items = await session.get_items()
    assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
    assert [i["role"] for i in await session.get_items(limit=2)] == ["user", "assistant"]
    async with AsyncClient(served.base, user_id=user) as pgr:
        stored = (await pgr.list_messages(session.session_id)).items
        assert [m.content for m in stored] == [
            "My name is Ana.",
            "Hello Ana.",
            "What is my name?",
            "Your name is Ana.",
        ]
        recalled = await pgr.memory_query("what is the user's name?", min_score=0.0)
        assert any("Ana" in i.content for i in recalled.items)

    popped = await session.pop_item()
    assert popped == items[-1]
    assert len(await session.get_items()) == 3
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.client.aclose()


async def test_items_round_trip_and_other_users_get_404(served: Served, user: str) -> None:
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Quel temps fait-il ?"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "18 C, cloudy"},
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Il fait 18 degres.", "annotations": []}],
        },
    ]
    session = await PgrecallSession.start(served.base, user_id=user)
    await session.add_items(items)  # type: ignore[arg-type]
    assert await session.get_items() == items
    assert await session.get_items(limit=1) == items[-1:]

    intruder = PgrecallSession(session.session_id, AsyncClient(served.base, user_id=f"x-{user}"))
    attempts = [
        intruder.get_items,
        intruder.pop_item,
        intruder.clear_session,
        lambda: intruder.add_items([{"role": "user", "content": "hi"}]),  # type: ignore[list-item]
    ]
    for attempt in attempts:
        with pytest.raises(PgrecallError) as denied:
            await attempt()
        assert denied.value.status == 404
    assert await session.get_items() == items  # untouched
    await intruder.client.aclose()
    await session.client.aclose()


# -- scopes (issue 43, docs/agents.md) ---------------------------------------------------------


def test_a_store_per_agent_keeps_its_items(served: Served, user: str) -> None:
    """Two agents of one user with a store each (the store's own arguments, or a scoped
    client): neither sees the other's items; the user's unscoped items both see."""
    planner = PgrecallStore(served.base, user_id=user, agent_id="planner")
    writer_client = Client(served.base, user_id=user, agent_id="writer")
    writer_async = AsyncClient(served.base, user_id=user, agent_id="writer")
    writer = PgrecallStore(client=writer_client, async_client=writer_async)
    shared = PgrecallStore(served.base, user_id=user)
    try:
        ns = ("memories", "fact")
        planner.put(ns, "budget", {"content": "The planner's trip budget is 900 euros"})
        writer.put(ns, "style", {"content": "The writer's house style is British spelling"})
        shared.put(ns, "city", {"content": "The user lives in Porto"})
        assert planner.get(ns, "style") is None and writer.get(ns, "budget") is None
        found = {i.key for i in planner.search(("memories",), query="budget style city")}
        assert found == {"budget", "city"}
        found = {i.key for i in writer.search(("memories",), query="budget style city")}
        assert found == {"style", "city"}
        own = PgrecallStore(served.base, user_id=user, agent_id="planner", scope_mode="own")
        try:
            assert {i.key for i in own.search(("memories",))} == {"budget"}
        finally:
            own.close()
        assert {i.key for i in shared.search(("memories",))} == {"budget", "style", "city"}
    finally:
        for store in (planner, writer, shared):
            store.close()
        writer_client.close()
        asyncio.run(writer_async.aclose())


async def test_a_session_of_one_agent_is_not_another_agents(served: Served, user: str) -> None:
    session = await PgrecallSession.start(served.base, user_id=user, agent_id="support")
    order = [{"role": "user", "content": "My order number is 4417."}]
    await session.add_items(order)  # type: ignore[arg-type]
    assert len(await session.get_items()) == 1
    # the session's scope travels with its client: another agent's client gets a 404
    other = AsyncClient(served.base, user_id=user, agent_id="sales")
    intruder = PgrecallSession(session.session_id, other)
    with pytest.raises(PgrecallError) as denied:
        await intruder.get_items()
    assert denied.value.status == 404
    # a session made on a client with the agent is the agent's
    mine = AsyncClient(served.base, user_id=user, agent_id="support")
    same = PgrecallSession(session.session_id, mine)
    assert len(await same.get_items()) == 1
    # what the agent recalls leaves the other agent's turns out
    sales = await PgrecallSession.start(client=other)
    lead = [{"role": "user", "content": "My sales lead code is 9981."}]
    await sales.add_items(lead)  # type: ignore[arg-type]
    recalled = await same.client.memory_query("order number sales lead code", min_score=0.0)
    assert [i for i in recalled.items if "4417" in i.content]
    assert not [i for i in recalled.items if "9981" in i.content]
    for client in (other, same.client, session.client):
        await client.aclose()


async def test_the_adapters_never_write_into_a_space(served: Served, user: str) -> None:
    """Spaces do not map to a store address or a session: a store or session whose client
    names a space (the user holds a read grant) writes the user's own memory, never the
    space's, and the store's reads are the user's items alone."""
    space = f"adapters-{uuid.uuid4().hex[:8]}"
    writer = f"writer-{user}"
    async with AsyncClient(served.base) as admin:
        await admin.create_space(space)
        await admin.grant_space(space, writer, "write")
        await admin.grant_space(space, user, "read")
        await admin.as_user(writer).save_to_space(
            space, "The team's on-call rotation starts on Mondays", "fact"
        )
        reader = admin.as_user(user).scoped(spaces=[space])
        sync = Client(served.base, user_id=user, spaces=[space])
        store = PgrecallStore(client=sync, async_client=reader)
        try:
            ns = ("memories", "fact")
            await store.aput(ns, "pager", {"content": "The reader's on-call pager is pager-5"})
            hits = await store.asearch(("memories",), query="when does the on-call rotation start")
            assert [h.key for h in hits] == ["pager"]
        finally:
            sync.close()
        session = await PgrecallSession.start(client=reader)
        turn = [{"role": "user", "content": "My on-call phone is 555-0101."}]
        await session.add_items(turn)  # type: ignore[arg-type]
        # the space's writer reads the space, and nothing the reader wrote
        seen = (
            await admin.as_user(writer)
            .scoped(spaces=[space])
            .memory_query("on-call rotation pager phone", min_score=0.0)
        )
        contents = [i.content for i in seen.items]
        assert "The team's on-call rotation starts on Mondays" in contents
        assert not [c for c in contents if "pager-5" in c or "555-0101" in c]
        # the reader reads the space through its client until the grant is revoked
        mine = await reader.memory_query("on-call rotation", min_score=0.0)
        assert [i.space for i in mine.items if "rotation" in i.content] == [space]
        await admin.revoke_space(space, user)
        after = await reader.memory_query("on-call rotation", min_score=0.0)
        assert not [i for i in after.items if "rotation" in i.content]
        await admin.delete_space(space)
