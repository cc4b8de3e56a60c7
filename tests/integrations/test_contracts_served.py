"""The frameworks' contracts for the adapters, against a real `pgrecall serve` process with the
embedded defaults (no Redis): what langgraph-checkpoint's store and TTL suites and
openai-agents' session suites check, written here (their suites are run by hand from their
public sources: docs/integrations.md, "Running the frameworks' own suites").

LangGraph store: every filter operator (InMemoryStore's and PostgresStore's six), `put(...,
index=False)`, TTL (default TTL, per-put TTL, refresh on read, sweep, the sweeper thread).
Agents SDK session: the SDK's default settings, use from a new event loop per call
(`asyncio.run`), from threads, and `Runner.run_sync` after `asyncio.run(PgrecallSession.start())`.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message
from langgraph.store.base import TTLConfig

from pgrecall.agents_session import PgrecallSession
from pgrecall.langgraph_store import PgrecallStore
from tests.served import Served, serving


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving("pgr-contracts-") as server:
        yield server


def _store(served: Served, ttl: TTLConfig | None = None) -> PgrecallStore:
    return PgrecallStore(served.base, user_id=f"contract-{uuid.uuid4()}", ttl=ttl)


# -- LangGraph store ------------------------------------------------------------------------

DOCS = {
    "a": {"text": "red apple", "score": 4.5, "color": "red", "day": "2026-01-03"},
    "b": {"text": "green apple", "score": 4.0, "color": "green", "day": "2026-02-10"},
    "c": {"text": "blue car", "score": 3.2, "color": "blue", "day": "2026-03-01"},
    "d": {"text": "yellow banana", "score": 2.0, "color": "yellow"},
    "e": {"text": "odd one", "score": "high", "color": None},
}


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ({"color": "red"}, {"a"}),
        ({"color": {"$eq": "green"}}, {"b"}),
        ({"color": {"$ne": "red"}}, {"b", "c", "d", "e"}),
        ({"score": {"$gt": 3.2}}, {"a", "b"}),
        ({"score": {"$gte": 3.2}}, {"a", "b", "c"}),
        ({"score": {"$lt": 3.2}}, {"d"}),
        ({"score": {"$lte": 4}}, {"b", "c", "d"}),
        ({"score": {"$gt": 2, "$lt": 4.5}}, {"b", "c"}),
        ({"score": {"$gte": 4.0}, "color": "green"}, {"b"}),
        ({"day": {"$gte": "2026-02-01"}}, {"b", "c"}),  # strings compare as text
        ({"missing": {"$ne": 1}}, {"a", "b", "c", "d", "e"}),  # as InMemoryStore
        ({"color": None}, {"e"}),
    ],
)
def test_filter_operators(served: Served, condition: dict[str, Any], expected: set[str]) -> None:
    store = _store(served)
    for key, value in DOCS.items():
        store.put(("fruit",), key, value)
    listed = {i.key for i in store.search(("fruit",), filter=condition, limit=10)}
    assert listed == expected
    by_meaning = store.search(("fruit",), query="apple", filter=condition, limit=10)
    assert {i.key for i in by_meaning} == expected
    store.close()


def test_unindexed_items_are_not_found_by_meaning(served: Served) -> None:
    store = _store(served)
    store.put(("docs",), "one", {"text": "new text about dogs"})
    store.put(("docs",), "two", {"text": "new text about dogs"}, index=False)
    assert [i.key for i in store.search(("docs",), query="new text about dogs")] == ["one"]
    assert {i.key for i in store.search(("docs",))} == {"one", "two"}  # listed, not ranked
    fetched = store.get(("docs",), "two")
    assert fetched is not None and fetched.value == {"text": "new text about dogs"}
    store.put(("docs",), "two", {"text": "new text about dogs"})  # indexed again
    assert {i.key for i in store.search(("docs",), query="new text about dogs")} == {"one", "two"}
    store.close()


def test_ttl_expiry_refresh_and_sweep(served: Served) -> None:
    store = _store(served, ttl={"default_ttl": 2 / 60, "refresh_on_read": True})
    store.put(("t",), "default", {"v": 1})
    store.put(("t",), "short", {"v": 2}, ttl=1 / 60)
    store.put(("t",), "forever", {"v": 3}, ttl=None)
    pgr = store._client
    stamped = pgr.store_get(("t",), "default")
    assert stamped is not None and stamped.ttl == pytest.approx(2 / 60)
    assert stamped.expires_at is not None and stamped.expires_at > stamped.updated_at
    never = pgr.store_get(("t",), "forever")
    assert never is not None and never.expires_at is None and never.ttl is None
    time.sleep(1.5)
    # Expired: gone for every read before any sweep.
    assert store.get(("t",), "short") is None
    assert {i.key for i in store.search(("t",))} == {"default", "forever"}
    assert store.get(("t",), "default") is not None  # refreshed on read: 2 s from now
    time.sleep(1.0)
    assert store.get(("t",), "default", refresh_ttl=False) is not None
    assert store.sweep_ttl() == 1  # "short"
    time.sleep(1.5)
    assert store.get(("t",), "default") is None
    assert store.list_namespaces() == [("t",)]  # "forever" keeps the namespace
    assert store.sweep_ttl() == 1
    assert store.sweep_ttl() == 0
    store.close()


def test_search_refreshes_ttl_only_of_what_it_returns(served: Served) -> None:
    store = _store(served, ttl={"default_ttl": 2 / 60})
    store.put(("s",), "found", {"text": "kyoto trip", "kind": "trip"})
    store.put(("s",), "skipped", {"text": "tax forms", "kind": "tax"})
    time.sleep(1.2)
    assert [i.key for i in store.search(("s",), filter={"kind": "trip"})] == ["found"]
    time.sleep(1.2)
    assert store.get(("s",), "skipped", refresh_ttl=False) is None
    assert store.get(("s",), "found", refresh_ttl=False) is not None
    store.close()


def test_ttl_sweeper_thread(served: Served) -> None:
    store = _store(served, ttl={"default_ttl": 1 / 60, "sweep_interval_minutes": 0.5 / 60})
    store.start_ttl_sweeper()
    store.put(("w",), "k", {"v": 1})
    time.sleep(2.5)
    assert store.get(("w",), "k") is None
    assert store.stop_ttl_sweeper(timeout=5)
    assert store.sweep_ttl() == 0  # the sweeper deleted it: nothing is left to sweep
    store.close()


async def test_async_store_ttl_and_filters(served: Served) -> None:
    store = _store(served, ttl={"default_ttl": 1 / 60})
    await store.aput(("x",), "a", {"n": 1})
    await store.aput(("x",), "b", {"n": 5}, ttl=None)
    assert [i.key for i in await store.asearch(("x",), filter={"n": {"$gte": 2}})] == ["b"]
    await asyncio.sleep(1.5)
    assert await store.aget(("x",), "a") is None
    assert await store.asweep_ttl() == 1
    await store.aclose()


# -- Agents SDK session ---------------------------------------------------------------------


def test_session_defaults_to_the_sdks_settings(served: Served) -> None:
    session = PgrecallSession(str(uuid.uuid4()), base_url=served.base, user_id="u")
    assert session.session_settings == SessionSettings()
    limited = PgrecallSession("x", base_url=served.base, session_settings={"limit": 3})
    assert limited.session_settings == SessionSettings(limit=3)


def test_session_outlives_event_loops_and_works_from_threads(served: Served) -> None:
    user = f"loops-{uuid.uuid4()}"
    session = asyncio.run(PgrecallSession.start(served.base, user_id=user))  # loop 1, closed
    asyncio.run(session.add_items([{"role": "user", "content": "first"}]))  # loop 2
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            asyncio.run(session.add_items([{"role": "user", "content": f"thread {n}"}]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    items = asyncio.run(session.get_items())
    assert items[0] == {"role": "user", "content": "first"}
    assert sorted(i["content"] for i in items[1:]) == [f"thread {n}" for n in range(4)]
    assert asyncio.run(session.pop_item()) == items[-1]
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []


@pytest.fixture
def sdk_default_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close the thread default loop that `Runner.run_sync` makes and leaves open on purpose.

    The SDK keeps that loop (and its self-pipe, a unix socket pair) for later calls on the
    thread, and the next `asyncio.run` unsets it without closing it; left alone, the garbage
    collector reports it during whichever test runs next.
    """
    policy = asyncio.get_event_loop_policy()
    made: list[asyncio.AbstractEventLoop] = []
    new_event_loop = policy.new_event_loop

    def recording() -> asyncio.AbstractEventLoop:
        loop = new_event_loop()
        made.append(loop)
        return loop

    monkeypatch.setattr(policy, "new_event_loop", recording)
    yield
    for loop in made:
        if not loop.is_closed():
            loop.close()


@pytest.mark.usefixtures("sdk_default_loop")
def test_run_sync_after_asyncio_run_start(served: Served) -> None:
    user = f"runsync-{uuid.uuid4()}"
    session = asyncio.run(PgrecallSession.start(served.base, user_id=user))
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    run = RunConfig(tracing_disabled=True)
    model.enqueue([assistant_message("Hello Ana.")])
    first = Runner.run_sync(agent, "My name is Ana.", session=session, run_config=run)
    assert first.final_output == "Hello Ana."
    model.enqueue([assistant_message("Ana.")])
    second = Runner.run_sync(agent, "What is my name?", session=session, run_config=run)
    assert second.final_output == "Ana."
    sent = model.calls[-1].input
    assert [i.get("content") for i in sent][:1] == ["My name is Ana."]  # history went in
    limited = RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=1))
    model.enqueue([assistant_message("ok")])
    Runner.run_sync(agent, "Third.", session=session, run_config=limited)
    assert len(model.calls[-1].input) == 2  # one history item + the new input
    assert len(asyncio.run(session.get_items())) == 6
