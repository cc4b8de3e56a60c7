"""StreamTransport, the async client's HTTP/1.1 transport for `http://` services.

Against a real `pgrecall serve` (connections kept alive and reused, the same answers as httpx's
own transport, a stale connection replaced) and against a real socket server that answers
with what a service or a proxy in front of it may send (chunked bodies, a closed connection,
an informational response, gzip, a server that never answers or hangs up).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest

from pgrecall._transport import StreamTransport
from pgrecall.client import NO_RETRY, AsyncClient, PgrecallError
from tests.served import Served, free_port, serving

KEYS = {"PGRECALL_API_KEY": "svc-key", "PGRECALL_ADMIN_API_KEY": "adm-key"}

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving("pgr-transport-", KEYS) as server:
        yield server


def transport_of(pgr: AsyncClient) -> StreamTransport:
    transport = pgr._http._transport  # type: ignore[attr-defined]
    assert isinstance(transport, StreamTransport)
    return transport


async def test_the_client_reuses_one_connection_and_answers_as_httpx_does(served: Served) -> None:
    async with AsyncClient(
        served.base, user_id="tara", api_key="svc-key", admin_key="adm-key", retry=NO_RETRY
    ) as pgr:
        memory = await pgr.create_memory(
            {"user_id": "tara", "content": "Tara's boat is moored at Kinsale", "type": "fact"}
        )
        for _ in range(5):
            found = await pgr.memory_query("where is the boat moored?", min_score=0.0)
            assert found.items[0].id == str(memory.id)
        with pytest.raises(PgrecallError) as missing:
            await pgr.get_conversation("00000000-0000-0000-0000-000000000000")
        assert missing.value.status == 404
        assert transport_of(pgr).connections_opened == 1
        # httpx's own transport gets the same bytes for the same request.
        async with httpx.AsyncClient(base_url=served.base) as plain:
            own = httpx.AsyncClient(base_url=served.base, transport=StreamTransport())
            async with own:
                for path in ("/health", "/openapi.json", "/console/static/console.css"):
                    a, b = await plain.get(path), await own.get(path)
                    assert (a.status_code, a.content) == (b.status_code, b.content), path
                    assert a.headers.get("content-type") == b.headers.get("content-type")


async def test_https_and_an_injected_client_keep_httpx_transports() -> None:
    async with AsyncClient("https://memory.example") as secure:
        assert isinstance(secure._http._transport, httpx.AsyncHTTPTransport)  # type: ignore[attr-defined]
    async with httpx.AsyncClient() as own, AsyncClient("http://127.0.0.1:9", http=own) as given:
        assert given._http._transport is own._transport  # type: ignore[attr-defined]
        assert isinstance(own._transport, httpx.AsyncHTTPTransport)
    async with AsyncClient("HTTP://127.0.0.1:9", max_connections=3) as plain:
        assert transport_of(plain)._slots is not None
        assert transport_of(plain)._max_idle == 3


# -- a real socket server speaking the cases ----------------------------------------------------


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[str]:
    """A server on a free port; on exit every connection it accepted is closed and every
    handler ended (Python 3.11's Server.close leaves accepted connections open)."""
    handlers: set[asyncio.Task[object]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


def response(body: bytes, *headers: bytes, status: bytes = b"200 OK") -> bytes:
    lines = [b"HTTP/1.1 " + status, *headers, b"content-length: %d" % len(body)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def test_chunked_gzip_informational_and_connection_close_bodies() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not reader.at_eof():
            try:
                request = await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            seen.append(request)
            path = request.split(b" ")[1]
            if path == b"/chunked":
                writer.write(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                    b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n"
                )
            elif path == b"/gzip":
                writer.write(response(gzip.compress(b"zipped"), b"content-encoding: gzip"))
            elif path == b"/continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + response(b"after"))
            elif path == b"/close":
                writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end")
                await writer.drain()
                writer.close()
                return
            elif path == b"/empty":
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()
        writer.close()

    async with raw_server(handler) as base:
        transport = StreamTransport()
        async with httpx.AsyncClient(base_url=base, transport=transport) as http:
            chunked = await http.get("/chunked")
            assert chunked.content == b"hello world"
            assert (await http.get("/gzip")).content == b"zipped"
            assert (await http.get("/continue")).text == "after"
            assert (await http.get("/empty")).status_code == 204
            assert transport.connections_opened == 1  # all four on one connection
            posted = await http.post("/close", json={"a": 1})
            assert posted.text == "until the end"
            assert (await http.get("/chunked")).content == b"hello world"
            assert transport.connections_opened == 2  # the closed one was not reused
    assert seen[4].startswith(b"POST /close HTTP/1.1\r\n") and seen[4].endswith(b'{"a":1}')


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(response(b"once"))
        await writer.drain()
        writer.close()  # keep-alive timeout: the server hangs up after one answer

    async with raw_server(handler) as base:
        transport = StreamTransport()
        async with httpx.AsyncClient(base_url=base, transport=transport) as http:
            for _ in range(3):
                assert (await http.get("/")).text == "once"
                await asyncio.sleep(0.05)  # the FIN arrives while the connection is idle
            assert transport.connections_opened == 3


async def test_idle_connections_expire_before_the_servers_keepalive() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            writer.write(response(b"ok"))
            await writer.drain()
        writer.close()

    async with raw_server(handler) as base:
        transport = StreamTransport(httpx.Limits(keepalive_expiry=0.1))
        async with httpx.AsyncClient(base_url=base, transport=transport) as http:
            await http.get("/")
            await http.get("/")
            await asyncio.sleep(0.2)
            await http.get("/")
            assert transport.connections_opened == 2


async def test_failures_raise_httpx_errors_the_client_maps() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort")
        await writer.drain()
        writer.close()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SMTP ready\r\n\r\n")
        await writer.drain()
        writer.close()

    async with raw_server(silent) as base:
        with pytest.raises(httpx.ReadTimeout):
            async with httpx.AsyncClient(transport=StreamTransport(), timeout=0.2) as h:
                await h.get(base + "/")
    async with raw_server(hang_up) as base, httpx.AsyncClient(transport=StreamTransport()) as h:
        with pytest.raises(httpx.RemoteProtocolError):
            await h.get(base + "/")
    async with raw_server(garbage) as base, httpx.AsyncClient(transport=StreamTransport()) as h:
        with pytest.raises(httpx.RemoteProtocolError, match="status line"):
            await h.get(base + "/")
    closed_port = free_port()
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(transport=StreamTransport()) as h:
            await h.get(f"http://127.0.0.1:{closed_port}/")
    # Through the client: its error type, as with httpx's own transport.
    async with AsyncClient(f"http://127.0.0.1:{closed_port}", retry=NO_RETRY) as pgr:
        with pytest.raises(PgrecallError) as down:
            await pgr.health()
        assert (down.value.status, down.value.error) == (0, "ConnectError")


async def test_max_connections_bounds_concurrent_requests() -> None:
    active, peak = 0, 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal active, peak
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.02)
            active -= 1
            writer.write(response(b"ok"))
            await writer.drain()
        writer.close()

    async with raw_server(handler) as base:
        transport = StreamTransport(httpx.Limits(max_connections=3, max_keepalive_connections=3))
        async with httpx.AsyncClient(base_url=base, transport=transport) as http:
            answers = await asyncio.gather(*(http.get("/") for _ in range(12)))
    assert all(a.text == "ok" for a in answers)
    assert peak == 3 and transport.connections_opened == 3
