"""The client's newer methods: agent write tools, message deletion, time filters, readiness;
and the two clients offering the same methods."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from pgrecall import _calls
from pgrecall import client as client_module
from pgrecall.client import AsyncClient, Client, TimeFilters


def _public(kind: type) -> dict[str, tuple[str, str | None]]:
    """Each public method: its signature (return annotation aside: as_user names its own class)
    and its docstring."""
    return {
        name: (str(inspect.signature(member).replace(return_annotation=None)), member.__doc__)
        for name, member in inspect.getmembers(kind, callable)
        # for_app: only the async client can drive an ASGI app in-process.
        if not name.startswith("_") and name not in {"close", "aclose", "for_app"}
    }


def test_sync_and_async_clients_offer_the_same_methods() -> None:
    assert _public(Client) == _public(AsyncClient)
    assert all(
        inspect.iscoroutinefunction(getattr(AsyncClient, n))
        for n in _public(Client)
        if n not in {"as_user", "scoped"}  # views on the same connections
    )


def test_a_method_written_in_the_async_client_reaches_the_sync_one() -> None:
    """pgrecall/aio.py is the one place a route is written: Client is derived from it."""

    class Newer(AsyncClient):
        async def new_tool(self, note: str) -> dict[str, Any]:
            """A tool the service added."""
            return await self.call_tool("new_tool", {"note": note})

    class NewerSync(Client):
        pass

    client_module._derive(NewerSync, Newer)
    sent: list[tuple[str, bytes]] = []

    def service(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.path, request.content))
        return httpx.Response(200, json={"ok": True})

    http = httpx.Client(transport=httpx.MockTransport(service))
    sync = NewerSync("http://x", user_id="u", http=http)
    assert sync.new_tool("hi") == {"ok": True}
    assert NewerSync.new_tool.__doc__ == "A tool the service added."
    assert sent == [("/v1/tools/new_tool", b'{"note":"hi"}')]


def test_retry_safety_of_the_destructive_calls() -> None:
    # A repeated pop would remove a second message: never retried. The rest repeat safely.
    assert not _calls.delete_last_message("c").idempotent
    assert _calls.delete_messages("c").idempotent
    assert _calls.forget_memory("m").idempotent
    assert _calls.store_put(("a",), "k", {}).idempotent
    assert not _calls.save_memory("x", "fact", None, None, "old").idempotent


async def test_write_tools_deletion_time_filters_and_ready(
    make_pgrecall: Callable[..., Any], user_id: str
) -> None:
    async with make_pgrecall(user_id) as pgr:
        saved = await pgr.save_memory("Drinks oat milk in coffee", "preference", importance=0.8)
        assert (saved.action, saved.memory.type) == ("added", "preference")
        again = await pgr.save_memory("Drinks oat milk in coffee", "preference")
        assert again.action == "unchanged" and again.memory.id == saved.memory.id

        conv = await pgr.create_conversation()
        question = await pgr.append_message(conv.id, "user", "What should I cook tonight?")
        answer = await pgr.append_message(conv.id, "assistant", "Try a mushroom risotto.")
        rated = await pgr.rate_message(answer.id, "up")
        assert rated.action == "added" and rated.memory is not None
        assert (await pgr.rate_message(answer.id, "down")).removed == 1

        window = TimeFilters(time_to=datetime.now(UTC) - timedelta(days=1))
        assert (await pgr.query_memory("oat milk", times=window)).memories == []
        assert (await pgr.query_memory("oat milk")).memories[0].id == str(saved.memory.id)
        recent = TimeFilters(time_from=datetime.now(UTC) - timedelta(hours=1))
        assert (await pgr.memory_query("risotto", min_score=0.0, times=recent)).items

        forgotten = await pgr.forget_memory(saved.memory.id)
        assert forgotten.forgotten and forgotten.id == saved.memory.id
        # Forgotten: never returned again (the two turns about cooking may still come back as
        # near misses of a store of two turns: docs/retrieval.md, "The trained MiniLM by
        # default").
        returned = (await pgr.query_memory("oat milk in coffee")).memories
        assert str(saved.memory.id) not in {m.id for m in returned}
        assert all(m.source == "message" for m in returned)

        popped = await pgr.delete_last_message(conv.id)
        assert popped is not None and popped.id == answer.id
        assert [m.id for m in (await pgr.list_messages(conv.id)).items] == [question.id]
        assert await pgr.delete_messages(conv.id) == 1
        assert await pgr.delete_last_message(conv.id) is None

        state = await pgr.ready()
        assert state["ready"] is True and state["checks"]["database"] == "ok"
