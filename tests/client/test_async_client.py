"""AsyncClient against the real app: every route, the error type, retries across an outage."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr

from app.embedded import EmbeddedPostgres
from pgrecall import types as t
from pgrecall.client import AsyncClient, PgrecallError, RetryPolicy


@pytest.fixture
def restore_pg(pg: EmbeddedPostgres) -> Iterator[EmbeddedPostgres]:
    try:
        yield pg
    finally:
        pg.start()
        assert pg.is_running()


async def test_conversations_messages_session_and_queries(
    make_pgrecall: Callable[..., Any], user_id: str
) -> None:
    async with make_pgrecall(user_id) as pgr:
        conv = await pgr.create_conversation("setup")
        assert isinstance(conv, t.Conversation) and conv.title == "setup"
        assert (await pgr.get_conversation(conv.id)).id == conv.id

        first = await pgr.append_message(
            conv.id, "user", "I prefer uv over pip for Python projects", metadata={"k": "v"}
        )
        assert isinstance(first, t.Message) and first.metadata == {"k": "v"}
        imported = await pgr.import_messages(
            conv.id,
            [
                {"role": "assistant", "content": "Noted: uv it is."},
                {
                    "role": "user",
                    "content": "My cat is called Miso",
                    "created_at": datetime(2024, 5, 1, tzinfo=UTC),
                },
            ],
        )
        assert [m.seq for m in imported.items] == [first.seq + 1, first.seq + 2]
        assert imported.items[1].created_at == datetime(2024, 5, 1, tzinfo=UTC)

        page = await pgr.list_messages(conv.id, limit=2)
        assert next(m.content for m in page.items).startswith("I prefer uv")
        assert page.next_after is not None
        rest = await pgr.list_messages(conv.id, after=page.next_after)
        assert [m.content for m in rest.items] == ["My cat is called Miso"]
        assert rest.next_after is None

        listed = await pgr.list_conversations(limit=10)
        assert [c.id for c in listed.items] == [conv.id]

        session = await pgr.get_session(conv.id)
        assert [m["content"] for m in session.messages][-1] == "My cat is called Miso"
        goal = await pgr.set_session_goal(conv.id, "set up a project")
        assert goal.goal == "set up a project"

        tool = await pgr.query_memory("which package manager should I use for Python?")
        assert isinstance(tool, t.QueryMemoryResult)
        assert tool.memories and "uv" in tool.memories[0].content
        assert "<memories>" in tool.formatted

        internal = await pgr.memory_query("what is the cat called?", limit=3, min_score=0.0)
        assert any("Miso" in i.content for i in internal.items)
        assert all(i.source_kind == "message" for i in internal.items)

        definitions = await pgr.tools()
        assert definitions["tools"][0]["function"]["name"] == "query_memory"


async def test_admin_memories_round_trip(make_pgrecall: Callable[..., Any], user_id: str) -> None:
    async with make_pgrecall(user_id) as pgr:
        item = {"user_id": user_id, "content": "Prefers dark roast coffee", "type": "preference"}
        created = await pgr.create_memory(item)
        assert isinstance(created, t.Memory) and created.type == "preference"
        again = await pgr.create_memory(item)  # the service deduplicates by text
        assert again.id == created.id

        bulk = await pgr.create_memories(
            [item, {"user_id": user_id, "content": "Lives in Lisbon", "type": "fact"}]
        )
        assert [d.index for d in bulk.duplicates] == [0] and len(bulk.items) == 1

        page = await pgr.list_memories(user_id, type="fact")
        assert [m.content for m in page.items] == ["Lives in Lisbon"] and page.total == 1

        updated = await pgr.update_memory(user_id, created.id, importance=0.9)
        assert updated.importance == pytest.approx(0.9)
        await pgr.delete_memory(user_id, created.id)
        assert (await pgr.get_memory(user_id, created.id)).deleted_at is not None
        restored = await pgr.restore_memory(user_id, created.id)
        assert restored.deleted_at is None

        found = await pgr.query_memory("how do they take their coffee?")
        assert [m.id for m in found.memories][:1] == [str(created.id)]

        moved = await pgr.update_memory(user_id, created.id, content="Prefers oat flat whites")
        assert moved.id != created.id  # a new meaning supersedes the old version
        history = await pgr.memory_history(moved.id)
        assert isinstance(history, t.MemoryHistory) and history.current == moved.id
        assert [v.id for v in history.versions] == [created.id, moved.id]
        admin_view = await pgr.admin_memory_history(user_id, created.id)
        assert [v.content for v in admin_view.versions] == [item["content"], moved.content]

        lines = await pgr.export()
        kinds = [line["kind"] for line in lines]
        assert kinds[0] == "header" and kinds[-1] == "end"
        assert {line["content"] for line in lines if line["kind"] == "memory"} >= {
            "Prefers dark roast coffee",
            "Prefers oat flat whites",
            "Lives in Lisbon",
        }
        assert all(line.get("embedding") is None for line in lines)


async def test_errors_carry_the_service_body(
    make_pgrecall: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    async with make_pgrecall(user_id) as pgr:
        conv = await pgr.create_conversation()
        with pytest.raises(PgrecallError) as missing:
            await pgr.as_user(other_user_id).get_conversation(conv.id)
        assert (missing.value.status, missing.value.error) == (404, "NotFoundError")
        assert missing.value.correlation_id

        with pytest.raises(PgrecallError) as invalid:
            await pgr.append_message(conv.id, "user", "   ")
        assert invalid.value.status == 422 and invalid.value.error == "ValidationError"
        assert invalid.value.fields and invalid.value.fields[0]["field"] == "body.content"

        with pytest.raises(PgrecallError) as bad_user:
            await pgr.as_user("has space").list_conversations()
        assert bad_user.value.fields == [
            {"field": "header.X-User-Id", "reason": bad_user.value.fields[0]["reason"]}
        ]


async def test_auth_keys_are_sent(make_pgrecall: Callable[..., Any], user_id: str) -> None:
    keys = {"api_key": SecretStr("svc-key"), "admin_api_key": SecretStr("adm-key")}
    async with make_pgrecall(user_id, settings=keys) as anonymous:
        with pytest.raises(PgrecallError) as denied:
            await anonymous.list_conversations()
        assert denied.value.status == 401
    async with make_pgrecall(user_id, settings=keys, api_key="svc-key", admin_key="adm-key") as pgr:
        assert (await pgr.list_conversations()).items == []
        page = await pgr.list_memories(user_id)
        assert page.total == 0
    async with make_pgrecall(user_id, settings=keys, api_key="svc-key") as no_admin:
        with pytest.raises(PgrecallError) as forbidden:
            await no_admin.list_memories(user_id)
        assert forbidden.value.status == 403


async def test_async_console_signs_in_and_reads_pages(
    make_pgrecall: Callable[..., Any], user_id: str
) -> None:
    keys = {"admin_api_key": SecretStr("adm-key")}
    async with make_pgrecall(user_id, settings=keys, admin_key="adm-key") as pgr:
        assert await pgr.health() == {"status": "ok"}
        await pgr.create_memory({"user_id": user_id, "content": "Uses tabs", "type": "fact"})
        await pgr.console.login()
        page = await pgr.console.page("/user", {"user": user_id})
        assert page.status == 200 and "Uses tabs" in page.html
        created = await pgr.console.submit(
            "/memory/create", {"content": "Uses spaces in YAML", "type": "fact"}, {"user": user_id}
        )
        assert created.status == 303 and created.location is not None
        assert [m.content for m in (await pgr.list_memories(user_id)).items] == [
            "Uses spaces in YAML",
            "Uses tabs",
        ]


async def test_write_is_retried_across_a_postgres_outage(
    make_pgrecall: Callable[..., Any], restore_pg: EmbeddedPostgres, user_id: str
) -> None:
    pg = restore_pg
    waits: list[float] = []

    async def restart_then_wait(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.to_thread(pg.start)

    async with make_pgrecall(user_id, sleep=restart_then_wait) as pgr:
        conv = await pgr.create_conversation("before")
        pg.stop()
        content = f"written across the outage {uuid.uuid4()}"
        stored = await pgr.append_message(conv.id, "user", content)
    assert waits == [1.0]  # the service's Retry-After
    assert stored.content == content
    async with make_pgrecall(user_id) as pgr:
        page = await pgr.list_messages(conv.id)
    assert [m.content for m in page.items] == [content]


async def test_outage_longer_than_the_retries_raises_503(
    make_pgrecall: Callable[..., Any], restore_pg: EmbeddedPostgres, user_id: str
) -> None:
    pg = restore_pg
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    async with make_pgrecall(
        user_id, sleep=record, retry=RetryPolicy(max_retries=2, max_delay=0.5)
    ) as pgr:
        await pgr.create_conversation()  # warm the pool
        pg.stop()
        with pytest.raises(PgrecallError) as failed:
            await pgr.list_conversations()
        pg.start()
    assert failed.value.status == 503 and failed.value.error == "DatabaseUnavailableError"
    assert waits == [0.5, 0.5]  # Retry-After 1, capped by max_delay; two retries


async def test_unreachable_service_is_one_error_type() -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    async with AsyncClient("http://127.0.0.1:9", user_id="u", sleep=record) as pgr:
        with pytest.raises(PgrecallError) as failed:
            await pgr.create_conversation()
    assert failed.value.status == 0 and failed.value.error == "ConnectError"
    assert waits == [0.5, 1.0, 2.0]
