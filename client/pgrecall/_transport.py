"""HTTP/1.1 over asyncio streams: the async client's transport for `http://` services.

httpx's default transport (httpcore over anyio) cost the client 0.5-0.7 ms more CPU per request
than this one on this project's 2-core machine (`bench.real`'s load generator,
docs/performance.md, "The client's own cost"), beside a service answering in about ten
milliseconds. This transport does what the client needs and no more: one request at a time per
connection, kept alive and reused, bodies delimited by Content-Length or chunked encoding (or
the connection's end), the request's connect, read, write and pool timeouts, and httpx's
exceptions, so the client's retry rule and error mapping see what they would see from httpx's
own transport. Responses are read whole (the client streams nothing). TLS and proxies stay with
httpx: `https://` services use its transport, and proxies from the environment are mounted by
httpx in front of this one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field

import httpx

MAX_HEAD_BYTES = 64 * 1024  # a response's status line and headers
_NO_BODY_STATUSES = frozenset({204, 304})


@dataclass(eq=False)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self, expiry: float | None) -> bool:
        """Still open and not idle past the keep-alive expiry: a server closes an idle
        connection after a few seconds (uvicorn: 5), and its FIN shows as end of stream."""
        if self.writer.is_closing() or self.reader.at_eof():
            return False
        return expiry is None or time.monotonic() - self.idle_since < expiry

    def close(self) -> None:
        self.writer.close()


@dataclass(frozen=True)
class _Head:
    status: int
    reason: bytes
    version: bytes
    headers: list[tuple[bytes, bytes]]

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def has_token(self, name: bytes, token: bytes) -> bool:
        return any(
            k.lower() == name and token in (p.strip().lower() for p in v.split(b","))
            for k, v in self.headers
        )


class StreamTransport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 over asyncio streams (module docstring). `limits` as httpx's:
    at most `max_connections` open at once, `max_keepalive_connections` kept idle for at
    most `keepalive_expiry` seconds."""

    def __init__(self, limits: httpx.Limits | None = None) -> None:
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._max_idle = limits.max_keepalive_connections
        self._expiry = limits.keepalive_expiry
        self._slots = asyncio.Semaphore(limits.max_connections) if limits.max_connections else None
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._closed = False
        self.connections_opened = 0  # for tests and benches: how often a connection was made

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"this transport speaks plain http, not {request.url.scheme!r}", request=request
            )
        if self._closed:
            raise RuntimeError("the transport is closed")
        timeouts = request.extensions.get("timeout", {})
        if self._slots is None:
            return await self._exchange(request, timeouts)
        try:
            async with asyncio.timeout(timeouts.get("pool")):  # no task per request
                await self._slots.acquire()
        except TimeoutError as exc:
            raise httpx.PoolTimeout("no connection free in time", request=request) from exc
        try:
            return await self._exchange(request, timeouts)
        finally:
            self._slots.release()

    async def aclose(self) -> None:
        self._closed = True
        idle = [conn for conns in self._idle.values() for conn in conns]
        self._idle.clear()
        for conn in idle:
            conn.close()
        # Wait for the sockets to close: a loop that ends right after would leave them open.
        await asyncio.gather(*(c.writer.wait_closed() for c in idle), return_exceptions=True)

    # -- one request on one connection ---------------------------------------------------------

    async def _exchange(self, request: httpx.Request, timeouts: dict[str, float]) -> httpx.Response:
        origin = (request.url.host, request.url.port or 80)
        conn = self._checkout(origin) or await self._connect(origin, request, timeouts)
        try:
            await self._send(conn, request, timeouts.get("write"))
            head, body, reusable = await self._receive(conn, request, timeouts.get("read"))
        except BaseException:
            conn.close()  # half-done exchange (error, timeout, cancellation): never reused
            raise
        if reusable and not self._closed:
            self._checkin(origin, conn)
        else:
            conn.close()
        return httpx.Response(
            head.status,
            headers=head.headers,
            stream=httpx.ByteStream(body),
            request=request,
            extensions={"http_version": head.version, "reason_phrase": head.reason},
        )

    def _checkout(self, origin: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.usable(self._expiry):
                return conn
            conn.close()
        return None

    def _checkin(self, origin: tuple[str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if self._max_idle is not None and len(idle) >= self._max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    async def _connect(
        self, origin: tuple[str, int], request: httpx.Request, timeouts: dict[str, float]
    ) -> _Connection:
        try:
            async with asyncio.timeout(timeouts.get("connect")):
                reader, writer = await asyncio.open_connection(*origin, limit=MAX_HEAD_BYTES)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connect to {origin} timed out", request=request) from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        self.connections_opened += 1
        return _Connection(reader, writer)

    async def _send(self, conn: _Connection, request: httpx.Request, seconds: float | None) -> None:
        body = await request.aread()
        target = request.url.raw_path
        lines = [request.method.encode("ascii"), b" ", target, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            lines += [name, b": ", value, b"\r\n"]
        lines.append(b"\r\n")
        conn.writer.write(b"".join(lines) + body)  # one write: head and body in one segment
        try:
            async with asyncio.timeout(seconds):
                await conn.writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("sending the request timed out", request=request) from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from exc

    async def _receive(
        self, conn: _Connection, request: httpx.Request, seconds: float | None
    ) -> tuple[_Head, bytes, bool]:
        """(head, body, whether the connection can carry another request)."""
        reader = conn.reader

        async def read(step: Awaitable[bytes]) -> bytes:
            try:
                async with asyncio.timeout(seconds):  # no task per read, unlike wait_for
                    return await step
            except TimeoutError as exc:
                raise httpx.ReadTimeout("reading the response timed out", request=request) from exc
            except asyncio.IncompleteReadError as exc:
                raise httpx.RemoteProtocolError(
                    "server disconnected without sending a complete response", request=request
                ) from exc
            except asyncio.LimitOverrunError as exc:
                raise httpx.RemoteProtocolError(
                    "response head or chunk line too long", request=request
                ) from exc
            except OSError as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc

        while True:  # informational responses (1xx, not 101) precede the final one
            head = _parse_head(await read(reader.readuntil(b"\r\n\r\n")), request)
            if not 100 <= head.status < 200 or head.status == 101:
                break
        reusable = head.version == b"HTTP/1.1" and not head.has_token(b"connection", b"close")
        if request.method == "HEAD" or head.status in _NO_BODY_STATUSES or head.status < 200:
            return head, b"", reusable
        if head.has_token(b"transfer-encoding", b"chunked"):
            chunks = []
            while True:
                line = await read(reader.readuntil(b"\r\n"))
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError as exc:
                    raise httpx.RemoteProtocolError("bad chunk size", request=request) from exc
                if size == 0:
                    while (await read(reader.readuntil(b"\r\n"))) != b"\r\n":
                        pass  # trailers
                    return head, b"".join(chunks), reusable
                chunks.append(await read(reader.readexactly(size)))
                if await read(reader.readexactly(2)) != b"\r\n":
                    raise httpx.RemoteProtocolError("malformed chunk", request=request)
        length = head.header(b"content-length")
        if length is not None:
            try:
                n = int(length)
            except ValueError as exc:
                raise httpx.RemoteProtocolError("bad Content-Length", request=request) from exc
            return head, await read(reader.readexactly(n)), reusable
        return head, await read(reader.read()), False  # delimited by the connection's end


def _parse_head(raw: bytes, request: httpx.Request) -> _Head:
    lines = raw[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"malformed status line {lines[0]!r}", request=request)
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise httpx.RemoteProtocolError(f"malformed header line {line!r}", request=request)
        headers.append((name, value.strip()))
    reason = parts[2] if len(parts) > 2 else b""
    return _Head(int(parts[1]), reason, parts[0], headers)
