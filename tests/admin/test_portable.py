"""Export and import: a user's data round-trips exactly (counts, contents, times, chains)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from app.db import user_session
from app.errors import ConflictError, ValidationFailedError
from app.services.portable import ImportReport, import_export, parse_export
from app.services.purge import count_user_rows, purge_user
from tests.helpers import add_messages, headers

BERLIN = "The user lives in Berlin"
LISBON = "The user moved to Lisbon"


@pytest.fixture
async def served(
    make_client: Callable[..., Any],
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    async with make_client() as pair:
        yield pair


async def _populate(client: httpx.AsyncClient, user: str) -> None:
    """Two conversations, a supersession chain, a forgotten, an expired and a rated memory."""
    first = await add_messages(
        client,
        user,
        [
            "I moved to Lisbon last week, after a long month of packing boxes. "
            "The new flat is near the river and gets the morning sun.",
            "Nice!",
        ],
    )
    await add_messages(client, user, ["Plan the Kyoto trip", "April works", "Book the ryokan"])
    admin = "/v1/admin/memories"
    body = {"user_id": user, "type": "fact", "created_at": "2025-01-10T09:00:00Z"}
    berlin = (await client.post(admin, json={**body, "content": BERLIN, "tags": ["home"]})).json()
    await client.post(
        admin,
        json={
            **body,
            "content": LISBON,
            "supersedes": berlin["id"],
            "created_at": "2025-09-01T00:00:00Z",
            "metadata": {"via": "test", "n": [1, 2]},
            "tags": ["home", "moves"],
        },
    )
    gone = (await client.post(admin, json={**body, "content": "Drives a Volvo"})).json()
    await client.post("/v1/tools/forget_memory", json={"id": gone["id"]}, headers=headers(user))
    await client.post(
        admin,
        json={**body, "content": "Has a gym pass", "expires_at": "2025-02-01T00:00:00Z"},
    )
    rated = await client.post(
        "/v1/tools/rate_message",
        json={"message_id": first[0]["id"], "vote": "up"},
        headers=headers(user),
    )
    assert rated.status_code == 200, rated.text


async def _export(client: httpx.AsyncClient, user: str, embeddings: bool) -> list[dict[str, Any]]:
    r = await client.get(
        "/v1/export", params={"embeddings": str(embeddings).lower()}, headers=headers(user)
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in r.text.splitlines()]


def _normalised(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The export with the user, the export time and the ids (renamed consistently in order of
    first appearance) taken out: what must survive a round trip into another user."""
    names: dict[str, str] = {}

    def rename(value: Any) -> Any:
        if isinstance(value, str) and _is_uuid(value):
            return names.setdefault(value, f"id{len(names)}")
        return value

    out = []
    for line in lines:
        line = {k: v for k, v in line.items() if k not in ("user_id", "exported_at", "embedding")}
        out.append({k: rename(v) if k.endswith("id") else v for k, v in line.items()})
    return out


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


async def _import(app: FastAPI, lines: list[dict[str, Any]], user: str, **kw: Any) -> ImportReport:
    res = app.state.resources
    parsed = parse_export(json.dumps(line) for line in lines)
    async with user_session(res.sessionmaker, user) as session, session.begin():
        return await import_export(session, parsed, res.embeddings, user_id=user, **kw)


async def test_round_trip_into_another_user(served: Any, user_id: str, other_user_id: str) -> None:
    client, app = served
    await _populate(client, user_id)
    exported = await _export(client, user_id, embeddings=True)
    kinds = [line["kind"] for line in exported]
    assert kinds[0] == "header" and kinds[-1] == "end"
    assert exported[-1]["counts"] == {"conversations": 2, "messages": 5, "memories": 5}

    report = await _import(app, exported, other_user_id)
    assert report.counts == exported[-1]["counts"] and not report.ids_kept
    assert report.reembedded == 0  # the file's vectors are of the configured model
    # Passages are not in the file: the import makes them as the write path does.
    for user in (user_id, other_user_id):
        rows = await count_user_rows(app.state.resources.sessionmaker, user)
        assert rows["message_passages"] == 2, rows
    again = await _export(client, other_user_id, embeddings=True)
    assert _normalised(again) == _normalised(exported)
    assert {line.get("id") for line in again}.isdisjoint(
        {line.get("id") for line in exported} - {None}
    )
    for before, after in zip(exported, again, strict=True):
        if "embedding" in before:
            assert np.array_equal(before["embedding"], after["embedding"])

    # The copy behaves like the original: valid now, as_of, history.
    ask = {"query": "where does the user live", "min_score": 0.0, "types": ["fact"]}
    for user in (user_id, other_user_id):
        now = await client.post("/v1/memory/query", json=ask, headers=headers(user))
        assert [i["content"] for i in now.json()["items"]] == [LISBON]
        then = await client.post(
            "/v1/memory/query", json={**ask, "as_of": "2025-06-01T00:00:00Z"}, headers=headers(user)
        )
        assert [i["content"] for i in then.json()["items"]] == [BERLIN]
    lisbon = next(line for line in again if line.get("content") == LISBON)
    history = await client.get(
        f"/v1/memories/{lisbon['id']}/history", headers=headers(other_user_id)
    )
    assert [v["content"] for v in history.json()["versions"]] == [BERLIN, LISBON]

    # Without vectors the texts are embedded again: same rows, same vectors (same model).
    await app.state.resources.usage.drain()
    plain = await _export(client, user_id, embeddings=False)
    assert all("embedding" not in line for line in plain)
    third = f"{other_user_id}-3"
    report = await _import(app, plain, third)
    assert report.reembedded == 10
    copy = await _export(client, third, embeddings=True)
    # The queries above stamped the usage of what they returned: the copy keeps it too.
    lisbon = next(line for line in plain if line.get("content") == LISBON)
    assert lisbon["times_retrieved"] == 1 and lisbon["last_retrieved_at"] is not None
    assert lisbon["tags"] == ["home", "moves"]
    assert _normalised(copy)[1:] == _normalised(plain)[1:]  # all but the header's flag
    for before, after in zip(exported, copy, strict=True):
        if "embedding" in before:
            assert np.allclose(before["embedding"], after["embedding"], atol=1e-6)


async def test_import_refuses_a_user_with_data_unless_told(
    served: Any, user_id: str, other_user_id: str
) -> None:
    client, app = served
    await _populate(client, user_id)
    exported = await _export(client, user_id, embeddings=True)
    await add_messages(client, other_user_id, ["I already have a conversation"])
    with pytest.raises(ConflictError, match="already has data"):
        await _import(app, exported, other_user_id)
    report = await _import(app, exported, other_user_id, allow_non_empty=True)
    assert not report.ids_kept
    counts = await count_user_rows(app.state.resources.sessionmaker, other_user_id)
    assert (counts["conversations"], counts["messages"], counts["memory_items"]) == (3, 6, 5)


async def test_restore_after_purge_keeps_the_ids(served: Any, user_id: str) -> None:
    client, app = served
    await _populate(client, user_id)
    exported = await _export(client, user_id, embeddings=True)
    res = app.state.resources
    await purge_user(res.sessionmaker, res.cache, user_id)  # chains included
    counts = await count_user_rows(res.sessionmaker, user_id)
    assert not any(counts.values()), counts
    report = await _import(app, exported, user_id)
    assert report.ids_kept
    restored = await _export(client, user_id, embeddings=True)
    strip = [{k: v for k, v in line.items() if k != "exported_at"} for line in restored]
    assert strip == [{k: v for k, v in line.items() if k != "exported_at"} for line in exported]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda lines: lines[:-1], "truncated"),
        (lambda lines: [lines[0], *lines[2:]], "counts"),
        (lambda lines: [{**lines[0], "version": 9}, *lines[1:]], "version"),
        (lambda lines: lines[1:], "header"),
        (lambda lines: [*lines[:-1], {"kind": "mystery"}, lines[-1]], "unknown kind"),
    ],
)
async def test_a_damaged_file_is_refused_whole(
    served: Any, user_id: str, mutate: Callable[[list[Any]], list[Any]], message: str
) -> None:
    client, _ = served
    await add_messages(client, user_id, ["one", "two"])
    exported = await _export(client, user_id, embeddings=False)
    with pytest.raises(ValidationFailedError, match=message):
        parse_export(json.dumps(line) for line in mutate(exported))


async def test_cli_import_then_export(served: Any, user_id: str, run: Any, tmp_path: Path) -> None:
    """The commands an operator runs, on another database: import a file, export it again."""
    client, _ = served
    await _populate(client, user_id)
    exported = await _export(client, user_id, embeddings=True)
    source = tmp_path / "a.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in exported))
    imported = run("import", str(source), "--user", "cli-b", "--quiet")
    assert imported.returncode == 0, imported.stderr
    assert "imported into cli-b: conversations 2, messages 5, memories 5" in imported.stdout
    out = tmp_path / "b.jsonl"
    again = run("export", "--user", "cli-b", "--embeddings", "-o", str(out), "--quiet")
    assert again.returncode == 0, again.stderr
    assert "exported cli-b: conversations 2, messages 5, memories 5" in again.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert _normalised(lines) == _normalised(exported)
