"""The sync Client against a real `pgrecall serve` process (embedded defaults, auth on)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pgrecall import types as t
from pgrecall.client import Client, PgrecallError
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


def test_sync_client_wrong_key(served: Served) -> None:
    with (
        Client(served.base, user_id="alice", api_key="wrong") as pgr,
        pytest.raises(PgrecallError) as denied,
    ):
        pgr.list_conversations()
    assert (denied.value.status, denied.value.error) == (403, "PermissionDeniedError")
