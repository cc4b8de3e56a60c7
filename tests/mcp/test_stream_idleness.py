"""The GET /mcp idle watchdog (app/mcp/streams.py) around a real SSE response (sse_starlette's
EventSourceResponse, as the SDK sends it) with its ping interval lowered: keep-alive pings are
not activity, events and client bytes are. tests/mcp/test_mcp_streams.py checks the same on a
served instance at the real 15 s ping interval."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Message, Receive, Scope, Send

from app.mcp.streams import StreamLimits, is_keep_alive

PING_S = 0.3
IDLE_S = 1.5  # five pings' worth
SCOPE: Scope = {"type": "http", "method": "GET", "path": "/mcp", "headers": []}


def sse(ping_s: float, events: int = 0, every_s: float = 0.0) -> object:
    """An ASGI handler: an SSE response pinging every `ping_s`, sending `events` data events
    `every_s` apart, then nothing until cancelled."""

    async def content() -> AsyncIterator[ServerSentEvent]:
        for n in range(events):
            await anyio.sleep(every_s)
            yield ServerSentEvent(data=f"event {n}")
        await anyio.sleep_forever()

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        await EventSourceResponse(content(), ping=ping_s)(scope, receive, send)

    return handler


async def held(handler: object, receive: Receive | None = None) -> tuple[float, list[Message]]:
    """Seconds until the watchdog ended the stream, and what was sent."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def silent_client() -> Message:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    start = time.monotonic()
    with anyio.fail_after(IDLE_S + 10):
        await StreamLimits(1, 1, IDLE_S).hold(handler, SCOPE, receive or silent_client, send)  # type: ignore[arg-type]
    return time.monotonic() - start, sent


def bodies(sent: list[Message]) -> list[bytes]:
    return [m.get("body", b"") for m in sent if m["type"] == "http.response.body"]


def test_a_ping_is_keep_alive_and_an_event_is_not() -> None:
    ping = ServerSentEvent(comment="ping - 2026-01-01 00:00:00+00:00").encode()
    assert ping.startswith(b": ping") and is_keep_alive(ping)
    assert is_keep_alive(b"") and is_keep_alive(b": a\n: b\n\n")
    assert not is_keep_alive(ServerSentEvent(data="hello").encode())
    assert not is_keep_alive(b": ping\r\ndata: x\r\n\r\n")


async def test_a_stream_with_only_pings_closes_at_the_idle_limit() -> None:
    elapsed, sent = await held(sse(PING_S))
    pings = [b for b in bodies(sent) if b.startswith(b": ping")]
    assert len(pings) >= 3, bodies(sent)  # pinged all along, and closed anyway
    assert IDLE_S - 0.1 <= elapsed <= IDLE_S + 1.0, elapsed
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_events_keep_a_stream_open_and_it_closes_idle_after_the_last() -> None:
    events, every = 8, 0.3  # 2.4 s of events: past the idle limit
    elapsed, sent = await held(sse(PING_S, events, every))
    assert sum(b"data: event" in b for b in bodies(sent)) == events
    assert events * every + IDLE_S - 0.1 <= elapsed <= events * every + IDLE_S + 1.0, elapsed


async def test_what_the_client_sends_keeps_a_stream_open() -> None:
    chunks, every = 8, 0.3

    async def talking_client() -> Message:
        nonlocal chunks
        if chunks == 0:
            await anyio.sleep_forever()
        chunks -= 1
        await anyio.sleep(every)
        return {"type": "http.request", "body": b"x", "more_body": True}

    elapsed, _ = await held(sse(PING_S), talking_client)
    assert 8 * every + IDLE_S - 0.1 <= elapsed <= 8 * every + IDLE_S + 1.0, elapsed
