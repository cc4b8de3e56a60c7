"""kill -9 of the embedded postmaster under a write load: the service restarts it by itself
(app/supervisor.py), /ready is true again within 10 s, writes succeed again, and every write
it acknowledged is in the database (counted)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

from app.embedded import EmbeddedPostgres
from tests.served import Served, serving

RECOVERY_S = 10.0


async def _writer(
    client: httpx.AsyncClient, user: str, cid: str, acked: list[str], stop: asyncio.Event
) -> int:
    """Append messages until told to stop; `acked` gets the content of every 2xx. Returns how
    many were refused (503 while Postgres was away)."""
    refused = 0
    while not stop.is_set():
        content = f"write {uuid.uuid4()}"
        try:
            response = await client.post(
                f"/v1/conversations/{cid}/messages",
                json={"role": "user", "content": content},
                headers={"X-User-Id": user},
            )
        except httpx.TransportError:
            refused += 1
            continue
        if response.is_success:
            acked.append(content)
        else:
            assert response.status_code == 503, response.text  # never a 500
            refused += 1
            await asyncio.sleep(0.05)
    return refused


async def _ready_after(client: httpx.AsyncClient, since: float, limit_s: float) -> float | None:
    while time.monotonic() - since < limit_s:
        try:
            if (await client.get("/ready")).status_code == 200:
                return time.monotonic() - since
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    return None


async def _stored(pg: EmbeddedPostgres, user: str) -> set[str]:
    conn = await asyncpg.connect(pg.dsn)
    try:
        rows = await conn.fetch("SELECT content FROM messages WHERE user_id = $1", user)
    finally:
        await conn.close()
    return {r["content"] for r in rows}


async def _scenario(served: Served, pg: EmbeddedPostgres) -> None:
    user = f"sup-{uuid.uuid4()}"
    async with httpx.AsyncClient(base_url=served.base, timeout=30) as client:
        created = await client.post("/v1/conversations", json={}, headers={"X-User-Id": user})
        cid = created.json()["id"]
        acked: list[str] = []
        stop = asyncio.Event()
        writers = [asyncio.create_task(_writer(client, user, cid, acked, stop)) for _ in range(4)]
        await asyncio.sleep(1.0)
        before = len(acked)
        old = pg.postmaster()
        assert old is not None
        killed_at = time.monotonic()
        await asyncio.to_thread(pg.kill)
        ready_s = await _ready_after(client, killed_at, RECOVERY_S)
        after_ready = len(acked)
        await asyncio.sleep(1.0)  # writes succeed again
        stop.set()
        refused = sum(await asyncio.gather(*writers))
    assert before > 0, "no write succeeded before the kill"
    assert ready_s is not None, f"/ready not true within {RECOVERY_S} s:\n{served.output()[-3000:]}"
    assert len(acked) > after_ready, "no write succeeded after the restart"
    new = pg.postmaster()
    assert new is not None and new.pid != old.pid
    stored = await _stored(pg, user)
    missing = [c for c in acked if c not in stored]
    print(
        f"ready again {ready_s:.1f} s after kill -9; {len(acked)} writes acknowledged "
        f"({before} before the kill), {refused} refused, {len(missing)} missing"
    )
    assert missing == []
    assert "embedded postgres restarted" in served.output()


def test_kill_9_of_the_postmaster_heals_and_loses_no_acknowledged_write() -> None:
    with serving("pgr-sup-") as served:
        pg = EmbeddedPostgres(Path(served.log).parent / "data")
        try:
            asyncio.run(_scenario(served, pg))
        except AssertionError:
            print(served.output()[-6000:])
            raise
