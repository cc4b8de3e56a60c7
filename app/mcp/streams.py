"""Bounds on the GET /mcp streams (server-to-client SSE): how many may be open, per key and in
all, and how long one may stay open idle.

In the stateless mode pgrecall runs, nothing but keep-alive pings is ever sent on such a
stream: without bounds each one held a socket, a descriptor and a task for as long as the
client kept it (1,000 cost 1,000 descriptors and 73 MB). Over a limit the stream is refused
before it opens: 429 when the key has its share open, 503 when the service has; both JSON with
Retry-After.

Idle means that neither side said anything: the client sent no body bytes and the server sent
nothing but SSE comments. The SDK's responses send a `: ping - <time>` comment every 15 s
(sse_starlette's default) to keep proxies from cutting the connection; counted as activity, it
kept every stream open for good under any limit of 15 s or more, the 300 s default included.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Awaitable, Callable

import anyio
from starlette.types import Message, Receive, Scope, Send

from app.errors import CapacityError, RateLimitedError

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


class StreamLimits:
    def __init__(self, total: int, per_key: int, idle_s: float) -> None:
        self.total = total
        self.per_key = per_key
        self.idle_s = idle_s
        self.open: Counter[uuid.UUID | str] = Counter()

    @property
    def open_total(self) -> int:
        return sum(self.open.values())

    def admit(self, key: uuid.UUID | str) -> None:
        """Count one more open stream of `key`, or raise the refusal."""
        if self.open[key] >= self.per_key:
            raise RateLimitedError(
                f"this key has {self.per_key} GET /mcp streams open already "
                "(PGRECALL_MCP_MAX_STREAMS_PER_KEY); close one first"
            )
        if self.open_total >= self.total:
            raise CapacityError(
                f"the service has {self.total} GET /mcp streams open "
                "(PGRECALL_MCP_MAX_STREAMS); retry later"
            )
        self.open[key] += 1

    def release(self, key: uuid.UUID | str) -> None:
        self.open[key] -= 1
        if self.open[key] <= 0:
            del self.open[key]

    async def hold(self, handler: Handler, scope: Scope, receive: Receive, send: Send) -> None:
        """Run `handler` for an admitted stream; close it after `idle_s` idle (module doc)."""
        await _with_idle_timeout(self.idle_s, handler, scope, receive, send)


def is_keep_alive(body: bytes) -> bool:
    """A body chunk of SSE comment lines (and blank lines) only: a ping, not activity."""
    lines = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return all(not line or line.startswith(b":") for line in lines)


async def _with_idle_timeout(
    idle_s: float, handler: Handler, scope: Scope, receive: Receive, send: Send
) -> None:
    last_activity = anyio.current_time()
    started = finished = False

    async def tracked(message: Message) -> None:
        nonlocal last_activity, started, finished
        if message["type"] == "http.response.start":
            started = True
        elif message["type"] == "http.response.body":
            if not is_keep_alive(message.get("body", b"")):
                last_activity = anyio.current_time()
            finished = not message.get("more_body", False)
        await send(message)

    async def tracked_receive() -> Message:
        nonlocal last_activity
        message = await receive()
        if message["type"] == "http.request" and message.get("body"):
            last_activity = anyio.current_time()
        return message

    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while True:
                await anyio.sleep(max(0.0, last_activity + idle_s - anyio.current_time()))
                if anyio.current_time() - last_activity >= idle_s:
                    group.cancel_scope.cancel()
                    return

        group.start_soon(watch)
        await handler(scope, tracked_receive, tracked)
        group.cancel_scope.cancel()
    if started and not finished:  # cut by the idle timeout: end the response cleanly
        await send({"type": "http.response.body", "body": b"", "more_body": False})
