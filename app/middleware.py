"""Pure ASGI middleware: correlation ids, one value per identity header, request size limits."""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.encoding import check_body, check_query, refusal
from app.errors import RepeatedHeaderError, ServiceError
from app.observability import correlation_id_var

HEADER = b"x-correlation-id"


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class CorrelationIdMiddleware:
    """Accept a UUID X-Correlation-ID or create one; echo it; expose it to logs and writes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = dict(scope["headers"]).get(HEADER)
        if raw is None:
            value = str(uuid.uuid4())
        else:
            try:
                value = str(uuid.UUID(raw.decode("latin-1").strip()))
            except ValueError:
                await _send_json(
                    send,
                    422,
                    {
                        "error": "ValidationError",
                        "detail": "header.X-Correlation-ID: must be a UUID",
                        "fields": [
                            {"field": "header.X-Correlation-ID", "reason": "must be a UUID"}
                        ],
                    },
                    [],
                )
                return
        token = correlation_id_var.set(value)

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (HEADER, value.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_header)
        finally:
            correlation_id_var.reset(token)


# Every header a door reads to learn who the caller is or what it may do (app/api/deps.py,
# app/proxy/auth.py, app/mcp/http.py, the console's session cookie), and those the proxy passes
# on to the upstream as the caller's account: lower case as ASGI gives them, and as spelt.
IDENTITY_HEADERS = {
    b"authorization": "Authorization",
    b"x-user-id": "X-User-Id",
    b"x-pgrecall-key": "X-Pgrecall-Key",
    b"cookie": "Cookie",
    # the memory scope within the user (app/runtime/identity.py: an agent is a boundary too)
    b"x-agent-id": "X-Agent-Id",
    b"x-run-id": "X-Run-Id",
    b"x-scope-mode": "X-Scope-Mode",
    b"x-spaces": "X-Spaces",
    b"openai-organization": "OpenAI-Organization",
    b"openai-project": "OpenAI-Project",
}


def repeated_identity_header(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The first identity header that occurs more than once; None if none does."""
    seen: set[bytes] = set()
    for raw_name, _ in headers:
        name = raw_name.lower()
        if name not in IDENTITY_HEADERS:
            continue
        if name in seen:
            return IDENTITY_HEADERS[name]
        seen.add(name)
    return None


class SingleIdentityHeaderMiddleware:
    """400 for a request that repeats an identity or credential header, on every door.

    Starlette's `headers.get` and FastAPI's `Header()` take the first of repeated headers and
    others might take the last: behind a gateway that appends its own `X-User-Id` to the
    client's, the client would choose the user. A repeated one is refused before any door reads
    it, rather than guessing which one the sender meant.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            name = repeated_identity_header(scope["headers"])
            if name is not None:
                error = RepeatedHeaderError(f"header {name} is sent more than once: send it once")
                body = {"error": type(error).__name__, "detail": error.message}
                await _send_json(send, error.status_code, body, [])
                return
        await self.app(scope, receive, send)


class BodySizeLimitMiddleware:
    """413 for bodies over the limit, by Content-Length or while streaming; then bodies and
    query strings that are not UTF-8 are refused (app/encoding.py: 415 or 422).

    The body is read here, up to the limit, before the app sees it: an error raised from inside
    the app's `receive` would surface as FastAPI's generic 400 "error parsing the body".
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        detail = {
            "error": "PayloadTooLargeError",
            "detail": f"request body over {self.max_bytes} bytes",
        }
        headers = dict(scope["headers"])
        try:
            check_query(scope.get("query_string", b""))
        except ServiceError as exc:
            refused = refusal(exc)
            await _send_json(send, refused.status, refused.body, [])
            return
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await _send_json(send, 413, detail, [])
            return
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away mid-body: nothing to answer.
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await _send_json(send, 413, detail, [])
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            content_type = headers.get(b"content-type")
            check_body(content_type.decode("latin-1") if content_type else None, body)
        except ServiceError as exc:
            refused = refusal(exc)
            await _send_json(send, refused.status, refused.body, [])
            return
        replayed = False

        async def buffered_receive() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect as usual

        await self.app(scope, buffered_receive, send)
