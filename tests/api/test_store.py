"""/v1/store: key-addressable memories (what the LangGraph store adapter calls).

Through the typed client on the real app (Postgres under RLS, real Redis, the local embedder).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from app.services.store import match_namespaces
from pgrecall.client import AsyncClient, PgrecallError
from tests.helpers import headers


@pytest.fixture
async def pgr(make_client: Callable[..., Any], user_id: str) -> AsyncIterator[AsyncClient]:
    async with make_client() as (http, _):
        yield AsyncClient("http://test", user_id=user_id, http=http)


async def test_put_get_replace_delete(pgr: AsyncClient) -> None:
    ns = ("memories", "preference")
    first = await pgr.store_put(ns, "editor", {"content": "Prefers Helix over Vim", "since": 2024})
    assert first.namespace == list(ns) and first.key == "editor"
    assert first.type == "preference"  # the namespace's last label is a memory type
    got = await pgr.store_get(ns, "editor")
    assert got is not None and got.value == {"content": "Prefers Helix over Vim", "since": 2024}

    second = await pgr.store_put(ns, "editor", {"content": "Prefers Zed now"})
    assert second.id != first.id  # a new version; the old one is history
    assert second.value == {"content": "Prefers Zed now"}
    assert second.updated_at > first.updated_at
    assert second.created_at == first.created_at  # the key's first time, as LangGraph expects
    same = await pgr.store_put(ns, "editor", {"content": "Prefers Zed now"})
    assert (same.id, same.updated_at) == (second.id, second.updated_at)  # unchanged: no version

    assert await pgr.store_delete(ns, "editor") is True
    assert await pgr.store_get(ns, "editor") is None
    assert await pgr.store_delete(ns, "editor") is False  # idempotent
    revived = await pgr.store_put(ns, "editor", {"content": "Back to Vim"})
    assert revived.id not in (first.id, second.id)
    assert (await pgr.store_get(ns, "editor")) is not None
    chain = await pgr.memory_history(revived.id)  # the caller's view: forgotten ones hidden
    assert [v.content for v in chain.versions] == ["Prefers Helix over Vim", "Back to Vim"]
    assert chain.current == revived.id
    full = await pgr.admin_memory_history(pgr.user_id, revived.id)
    assert [v.content for v in full.versions] == [
        "Prefers Helix over Vim",
        "Prefers Zed now",
        "Back to Vim",
    ]
    assert full.versions[1].deleted_at is not None


async def test_equal_values_at_two_keys_are_two_items(pgr: AsyncClient) -> None:
    await pgr.store_put(("todo",), "a", {"done": True})
    await pgr.store_put(("todo",), "b", {"done": True})
    items = await pgr.store_search(("todo",))
    assert sorted(i.key for i in items) == ["a", "b"]
    assert {i.type for i in items} == {"note"}


async def test_search_by_prefix_filter_and_meaning(pgr: AsyncClient) -> None:
    await pgr.store_put(("kb", "pets"), "dog", {"text": "Pixel is a greyhound", "kind": "pet"})
    await pgr.store_put(("kb", "pets"), "cat", {"text": "Miso is a tabby cat", "kind": "pet"})
    await pgr.store_put(("kb", "work"), "job", {"text": "Works as a nurse", "kind": "job"})
    await pgr.store_put(("kbx",), "other", {"text": "A greyhound too", "kind": "pet"})

    under_kb = await pgr.store_search(("kb",), limit=10)
    assert sorted(i.key for i in under_kb) == ["cat", "dog", "job"]  # "kbx" is not under "kb"
    assert [i.key for i in await pgr.store_search(("kb",), limit=1, offset=0)] == ["job"]
    pets = await pgr.store_search(("kb",), filter={"kind": "pet"})
    assert sorted(i.key for i in pets) == ["cat", "dog"]

    ranked = await pgr.store_search(("kb",), query="which dog breed do I have?")
    assert ranked[0].key == "dog"
    assert ranked[0].score is not None and ranked[0].score > ranked[-1].score  # type: ignore[operator]
    everywhere = await pgr.store_search((), query="greyhound", limit=2)
    assert {i.key for i in everywhere} == {"dog", "other"}


async def test_items_are_memories_query_memory_finds(pgr: AsyncClient) -> None:
    await pgr.store_put(("memories", "fact"), "allergy", {"content": "Allergic to peanuts"})
    found = await pgr.query_memory("does the user have any food allergies?")
    assert [m.content for m in found.memories][:1] == ["Allergic to peanuts"]
    # Deleting through the store forgets the memory (the cached answer is dropped too).
    await pgr.store_delete(("memories", "fact"), "allergy")
    again = await pgr.query_memory("does the user have any food allergies?")
    assert "Allergic to peanuts" not in [m.content for m in again.memories]


async def test_an_agent_save_never_merges_into_a_store_item(pgr: AsyncClient) -> None:
    await pgr.store_put(("profile",), "city", {"content": "Lives in Porto, Portugal"})
    saved = await pgr.save_memory("Lives in Porto, Portugal.", "fact")
    assert saved.action == "added"  # not "updated": the store item keeps its value
    item = await pgr.store_get(("profile",), "city")
    assert item is not None and item.value == {"content": "Lives in Porto, Portugal"}


async def test_namespaces(pgr: AsyncClient) -> None:
    for ns in (("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z",)):
        await pgr.store_put(ns, "k", {"v": 1})
    assert await pgr.store_namespaces() == [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("z",)]
    assert await pgr.store_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d")]
    assert await pgr.store_namespaces(suffix=("d",)) == [("a", "b", "d")]
    assert await pgr.store_namespaces(prefix=("a", "*", "c")) == [("a", "b", "c")]
    assert await pgr.store_namespaces(max_depth=2) == [("a", "b"), ("a", "x"), ("z",)]
    assert await pgr.store_namespaces(limit=1, offset=1) == [("a", "b", "d")]
    await pgr.store_delete(("z",), "k")
    assert ("z",) not in await pgr.store_namespaces()


def test_namespace_matching_is_pure() -> None:
    stored = [["a", "b"], ["a", "b", "c"], ["b"]]
    assert match_namespaces(stored, [], [], None, 10, 0) == [["a", "b"], ["a", "b", "c"], ["b"]]
    assert match_namespaces(stored, ["*"], ["b"], None, 10, 0) == [["a", "b"], ["b"]]
    assert match_namespaces(stored, ["a", "b", "c", "d"], [], None, 10, 0) == []
    assert match_namespaces(stored, [], [], 1, 10, 0) == [["a"], ["b"]]


async def test_users_never_see_each_others_items(
    make_client: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    async with make_client() as (http, _):
        alice = AsyncClient("http://test", user_id=user_id, http=http)
        bob = alice.as_user(other_user_id)
        mine = await alice.store_put(("shared", "fact"), "code", {"content": "Locker 4417"})
        assert await bob.store_get(("shared", "fact"), "code") is None
        assert await bob.store_search(()) == []
        assert await bob.store_search((), query="locker code") == []
        assert await bob.store_namespaces() == []
        assert await bob.store_delete(("shared", "fact"), "code") is False
        # Bob's put at the same address is his own item; Alice's is untouched.
        his = await bob.store_put(("shared", "fact"), "code", {"content": "Locker 1"})
        assert his.id != mine.id
        kept = await alice.store_get(("shared", "fact"), "code")
        assert kept is not None and kept.value == {"content": "Locker 4417"}
        with pytest.raises(PgrecallError) as gone:
            await bob.forget_memory(mine.id)
        assert gone.value.status == 404


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/store/items", {"namespace": [], "key": "k", "value": {}}, "namespace"),
        ("/v1/store/items", {"namespace": ["a.b"], "key": "k", "value": {}}, "namespace"),
        ("/v1/store/items", {"namespace": [""], "key": "k", "value": {}}, "namespace"),
        ("/v1/store/items", {"namespace": ["a"] * 11, "key": "k", "value": {}}, "namespace"),
        ("/v1/store/items", {"namespace": ["a"], "key": "", "value": {}}, "key"),
        ("/v1/store/items", {"namespace": ["a"], "key": "k\u0000", "value": {}}, "key"),
        ("/v1/store/items", {"namespace": ["a"], "key": "k", "value": []}, "value"),
        (
            "/v1/store/items",
            {"namespace": ["a"], "key": "k", "value": {"t": "x" * 17_000}},
            "value",
        ),
        ("/v1/store/items", {"namespace": ["a"], "key": "k", "value": {}, "extra": 1}, "extra"),
        ("/v1/store/items:search", {"filter": {"n": {"$regex": "x"}}}, "filter"),
        ("/v1/store/items:search", {"filter": {"n": {"$gt": [1]}}}, "filter"),
        ("/v1/store/items", {"namespace": ["a"], "key": "k", "value": {}, "ttl": 0}, "ttl"),
        ("/v1/store/items:search", {"limit": 0}, "limit"),
        ("/v1/store/items:search", {"query": ""}, "query"),
        ("/v1/store/namespaces", {"max_depth": 0}, "max_depth"),
    ],
)
async def test_bad_input_is_422_naming_the_field(
    client: httpx.AsyncClient, user_id: str, path: str, body: dict[str, Any], field: str
) -> None:
    method = client.put if path == "/v1/store/items" else client.post
    response = await method(path, json=body, headers=headers(user_id))
    assert response.status_code == 422, response.text
    assert any(field in f["field"] for f in response.json()["fields"]), response.json()


async def test_an_admin_content_edit_supersedes_and_frees_the_key(
    pgr: AsyncClient, user_id: str
) -> None:
    first = await pgr.store_put(("profile", "fact"), "city", {"content": "Lives in Berlin"})
    newer = await pgr.update_memory(user_id, first.id, content="Lives in Lisbon")
    assert newer.id != first.id  # 14A: a content edit supersedes
    assert await pgr.store_get(("profile", "fact"), "city") is None  # the key is free again
    again = await pgr.store_put(("profile", "fact"), "city", {"content": "Lives in Porto"})
    assert again.id not in (first.id, newer.id)
    assert (await pgr.store_get(("profile", "fact"), "city")).value == {  # type: ignore[union-attr]
        "content": "Lives in Porto"
    }
