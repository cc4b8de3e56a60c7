"""GET /mcp streams are bounded: per key, in all, and in idle time (app/mcp/streams.py).

Served for real (a stream is a socket held open): one server with the limits lowered and an idle
time just above the SDK's real 15 s ping interval (per key, in all, idle: pings are no
activity), one at the defaults that holds 1,000 streams open and refuses the 11th of a key and
the 1,001st in all. The watchdog itself is also driven directly, around a real SSE response
with fast pings (tests/mcp/test_stream_idleness.py).
"""

from __future__ import annotations

import asyncio
import resource
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from sse_starlette import EventSourceResponse

from app.config import Settings
from app.errors import CapacityError, RateLimitedError
from app.mcp.streams import StreamLimits
from tests.served import Served, serving

PING_S = EventSourceResponse.DEFAULT_PING_INTERVAL  # 15 s: the SDK's SSE responses use it
IDLE_S = PING_S + 2.0  # above it: a ping must not count as activity
SETTINGS = {
    "PGRECALL_MCP_MAX_STREAMS": "3",
    "PGRECALL_MCP_MAX_STREAMS_PER_KEY": "2",
    "PGRECALL_MCP_STREAM_IDLE_S": str(IDLE_S),
}
STREAM_HEADERS = {"Accept": "text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving("pgr-mcps-", SETTINGS) as server:
        yield server


@pytest.fixture(scope="module")
def served_defaults() -> Iterator[Served]:
    """Stream limits at their defaults: 1,000 in all, 10 per key, 300 s idle. Each side holds a
    descriptor per stream: the soft limit is raised to the hard one first (the server inherits
    it); a hard limit too low for 1,000 is a skip that says so, not a failure."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 1_500
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}: cannot hold 1,000 streams")
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    try:
        with serving("pgr-mcpd-") as server:
            yield server
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def new_key(served: Served) -> str:
    created = httpx.post(f"{served.base}/v1/admin/keys", json={"user_id": f"s-{uuid.uuid4()}"})
    assert created.status_code == 201, created.text
    return str(created.json()["token"])


async def new_key_async(client: httpx.AsyncClient) -> str:
    created = await client.post("/v1/admin/keys", json={"user_id": f"s-{uuid.uuid4()}"})
    assert created.status_code == 201, created.text
    return str(created.json()["token"])


async def open_stream(client: httpx.AsyncClient, token: str) -> httpx.Response:
    request = client.build_request(
        "GET", "/mcp", headers={**STREAM_HEADERS, "Authorization": f"Bearer {token}"}
    )
    return await client.send(request, stream=True)


async def test_streams_are_limited_per_key_and_in_all_and_end_when_idle(served: Served) -> None:
    a, b, c = new_key(served), new_key(served), new_key(served)
    async with httpx.AsyncClient(base_url=served.base, timeout=30) as client:
        first = [await open_stream(client, a), await open_stream(client, a)]
        assert [r.status_code for r in first] == [200, 200], [r.status_code for r in first]
        opened = time.monotonic()
        over_key = await open_stream(client, a)
        await over_key.aread()
        third = await open_stream(client, b)
        over_all = await open_stream(client, c)
        await over_all.aread()
        assert third.status_code == 200
        assert over_key.status_code == 429 and over_key.headers["retry-after"] == "1"
        assert over_key.json()["error"] == "RateLimitedError"
        assert "PGRECALL_MCP_MAX_STREAMS_PER_KEY" in over_key.json()["detail"]
        assert over_all.status_code == 503 and over_all.json()["error"] == "CapacityError"

        # Nothing but a ping is ever sent on them: each ends after IDLE_S, and its place is free.
        for stream in (*first, third):
            body = await asyncio.wait_for(stream.aread(), timeout=IDLE_S + 10)
            assert b": ping" in body, body  # the server's keep-alive went out, and did not count
            await stream.aclose()
        ended = time.monotonic() - opened
        assert IDLE_S - 0.5 <= ended <= IDLE_S + 5, ended
        await asyncio.sleep(0.2)
        again = await open_stream(client, c)
        assert again.status_code == 200
        await again.aclose()


async def test_at_the_defaults_the_1001st_stream_is_refused(served_defaults: Served) -> None:
    defaults = Settings()
    total, per_key = defaults.mcp_max_streams, defaults.mcp_max_streams_per_key
    assert (total, per_key) == (1000, 10)
    # One connection per stream (a stream holds its connection for as long as it is open).
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    opened: list[httpx.Response] = []
    async with httpx.AsyncClient(
        base_url=served_defaults.base, timeout=60, limits=limits
    ) as client:
        keys = await asyncio.gather(*(new_key_async(client) for _ in range(total // per_key + 1)))
        try:
            # All at once, as a fleet of clients reconnecting would (each key read once).
            opened += await asyncio.gather(
                *(open_stream(client, key) for key in keys[:-1] for _ in range(per_key))
            )
            assert [r.status_code for r in opened] == [200] * total
            over_key = await open_stream(client, keys[0])
            await over_key.aread()
            over_all = await open_stream(client, keys[-1])
            await over_all.aread()
        finally:
            await asyncio.gather(*(r.aclose() for r in opened))
        assert over_key.status_code == 429, over_key.text
        assert "PGRECALL_MCP_MAX_STREAMS_PER_KEY" in over_key.json()["detail"]
        assert over_all.status_code == 503, over_all.text
        assert over_all.json() == {
            "error": "CapacityError",
            "detail": f"the service has {total} GET /mcp streams open "
            "(PGRECALL_MCP_MAX_STREAMS); retry later",
        }
        assert over_all.headers["retry-after"] == "1"
        # A stream the client closes frees its place (the server sees the disconnect).
        deadline = time.monotonic() + 10
        while True:
            again = await open_stream(client, keys[-1])
            if again.status_code == 200 or time.monotonic() > deadline:
                break
            await again.aread()
            await asyncio.sleep(0.2)
        await again.aclose()
        assert again.status_code == 200


def test_the_default_refuses_the_1001st_stream() -> None:
    defaults = Settings()
    limits = StreamLimits(
        defaults.mcp_max_streams, defaults.mcp_max_streams_per_key, defaults.mcp_stream_idle_s
    )
    assert (defaults.mcp_max_streams, defaults.mcp_max_streams_per_key) == (1000, 10)
    keys = [uuid.uuid4() for _ in range(100)]
    for key in keys:
        for _ in range(10):
            limits.admit(key)
    assert limits.open_total == 1000
    with pytest.raises(CapacityError):
        limits.admit(uuid.uuid4())
    with pytest.raises(RateLimitedError):
        limits.admit(keys[0])
    limits.release(keys[0])
    limits.admit(uuid.uuid4())  # a closed stream frees its place
