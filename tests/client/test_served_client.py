"""The sync Client against a real `pgrecall serve` process (embedded defaults, auth on)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pgrecall import types as t
from pgrecall.client import NO_RETRY, AsyncClient, Client, PgrecallError
from tests.served import Served, serving

KEYS = {"PGRECALL_API_KEY": "svc-key", "PGRECALL_ADMIN_API_KEY": "adm-key"}


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving("pgr-client-", KEYS) as server:
        yield server


def test_sync_client_round_trip(served: Served) -> None:
    with Client(served.base, user_id="alice", api_key="svc-key", admin_key="adm-key") as pgr:
        conv = pgr.create_conversation("served")
        pgr.import_messages(
            conv.id,
            [
                {"role": "user", "content": "We deploy on Fridays only after the smoke tests."},
                {"role": "assistant", "content": "Understood."},
            ],
        )
        msg = pgr.append_message(conv.id, "user", "The staging database is called nimbus")
        assert isinstance(msg, t.Message) and msg.seq == 3
        assert [m.seq for m in pgr.list_messages(conv.id).items] == [1, 2, 3]
        assert pgr.get_session(conv.id).messages[-1]["content"].endswith("nimbus")

        memory = pgr.create_memory(
            {"user_id": "alice", "content": "Alice's team uses Grafana", "type": "fact"}
        )
        assert pgr.list_memories("alice").items[0].id == memory.id

        found = pgr.memory_query("what is the staging database called?", min_score=0.0)
        assert "nimbus" in found.items[0].content
        tool = pgr.query_memory("which dashboard tool does the team use?")
        assert tool.memories[0].id == str(memory.id)

        with pytest.raises(PgrecallError) as foreign:
            pgr.as_user("mallory").get_conversation(conv.id)
        assert foreign.value.status == 404
        assert pgr.as_user("mallory").memory_query("nimbus", min_score=0.0).items == []

        assert [v.id for v in pgr.memory_history(memory.id).versions] == [memory.id]
        assert pgr.admin_memory_history("alice", memory.id).current == memory.id
        with pytest.raises(PgrecallError) as hidden:
            pgr.as_user("mallory").memory_history(memory.id)
        assert hidden.value.status == 404
        lines = pgr.export()
        assert lines[-1]["kind"] == "end" and lines[-1]["counts"]["messages"] == 3
        assert pgr.as_user("mallory").export()[-1]["counts"]["messages"] == 0


def test_sync_client_wrong_key(served: Served) -> None:
    with (
        Client(served.base, user_id="alice", api_key="wrong") as pgr,
        pytest.raises(PgrecallError) as denied,
    ):
        pgr.list_conversations()
    assert (denied.value.status, denied.value.error) == (403, "PermissionDeniedError")


def test_health_and_the_console_as_an_admin_drives_it(served: Served) -> None:
    with Client(
        served.base,
        user_id="carol",
        api_key="svc-key",
        admin_key="adm-key",
        retry=NO_RETRY,
        max_connections=2,
    ) as pgr:
        assert pgr.health() == {"status": "ok"}
        with pytest.raises(PgrecallError) as anonymous:
            pgr.console.page("/users")
        assert anonymous.value.status == 303  # sent to the sign-in page, not followed
        with pytest.raises(RuntimeError, match="sign in first"):
            pgr.console.submit("/ask", {"query": "anything"}, {"user": "carol"})
        with pytest.raises(PgrecallError) as wrong:
            pgr.console.login("not-the-admin-key")
        assert wrong.value.status == 401 and "wrong admin key" in wrong.value.detail

        pgr.console.login()
        fact = "Carol keeps the backups on a NAS called vault"
        pgr.create_memory({"user_id": "carol", "content": fact, "type": "fact"})
        users = pgr.console.page("/users", {"q": "carol"})
        assert users.status == 200 and ">carol<" in users.html
        answer = pgr.console.submit("/ask", {"query": "where are the backups?"}, {"user": "carol"})
        assert answer.status == 200 and "vault" in answer.html
        pgr.console.csrf = "forged"
        with pytest.raises(PgrecallError) as forged:
            pgr.console.submit("/ask", {"query": "where are the backups?"}, {"user": "carol"})
        assert forged.value.status == 403
        with pytest.raises(ValueError, match="single '/'"):
            pgr.console.page("//elsewhere.example/users")


def test_max_connections_sizes_the_clients_own_pool_only() -> None:
    with Client("http://127.0.0.1:9", max_connections=3) as pgr:
        assert pgr._http._transport._pool._max_connections == 3  # type: ignore[attr-defined]
        assert pgr._http._transport._pool._max_keepalive_connections == 3  # type: ignore[attr-defined]
    with httpx.Client() as http, pytest.raises(ValueError, match="size `http`"):
        Client("http://127.0.0.1:9", http=http, max_connections=3)
    with pytest.raises(ValueError, match="at least 1"):
        AsyncClient("http://127.0.0.1:9", max_connections=0)
