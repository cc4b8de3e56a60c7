"""Streaming: SSE chunks pass through as they arrive; the answer is assembled on the side and
stored when the stream ends, however it ends (upstream done, upstream dropped, client gone)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.deadline import Deadline

log = logging.getLogger(__name__)

DROPPED_EVENT = (
    b'data: {"error": {"message": "the chat upstream dropped the stream before it finished", '
    b'"type": "upstream_error", "code": "upstream_dropped"}}\n\n'
)

TIMEOUT_EVENT = (
    b'data: {"error": {"message": "the chat upstream did not finish within the deadline '
    b'(PGRECALL_CHAT_UPSTREAM_TIMEOUT_S)", "type": "upstream_error", '
    b'"code": "upstream_timeout"}}\n\n'
)

OnEnd = Callable[[str, str | None], Awaitable[None]]

# Stream endings that are the upstream's fault (a client that went away is not): the user's
# turn is marked with them. "upstream_failed": a later recall-tags round was refused.
UPSTREAM_ENDINGS = {"upstream_dropped", "upstream_timeout", "no_answer", "upstream_failed"}
NO_ANSWER_EVENT = (
    b'data: {"error": {"message": "the chat upstream answered without any chat completion '
    b'event", "type": "upstream_error", "code": "no_answer"}}\n\n'
)


class AnswerAssembler:
    """Reads SSE bytes and collects `choices[0].delta.content`."""

    def __init__(self) -> None:
        self._buffer = b""
        self.parts: list[str] = []
        self.done = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            event: Any = json.loads(payload)
        except ValueError:
            return
        choices = event.get("choices") if isinstance(event, dict) else None
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            content = (choice.get("delta") or {}).get("content")
            if isinstance(content, str):
                self.parts.append(content)

    @property
    def text(self) -> str:
        return "".join(self.parts)


class Relay:
    """Upstream SSE bytes to the client, unchanged; `finish` stores what was assembled."""

    def __init__(self, response: httpx.Response, on_end: OnEnd, deadline: Deadline) -> None:
        self.response = response
        self.on_end = on_end
        self.deadline = deadline
        self.answer = AnswerAssembler()
        self.ended: str | None = None  # None: still running; "" complete; else why it stopped
        self._finished = False

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.deadline.chunks(self.response.aiter_bytes()):
                self.answer.feed(chunk)
                yield chunk
        except (httpx.TransportError, TimeoutError) as exc:
            yield self.cut(exc)
        else:
            # Ended cleanly, yet without [DONE] or any text: not an answer (e.g. garbage).
            self.ended = "" if self.answer.done or self.answer.parts else "no_answer"

    def cut(self, exc: Exception) -> bytes:
        """The stream ended by the upstream's fault (dropped, or past the deadline): why, as
        `ended`, and the error event the client gets last."""
        log.warning("chat upstream stream cut short: %s", type(exc).__name__)
        if isinstance(exc, TimeoutError | httpx.TimeoutException):
            self.ended = "upstream_timeout"
            return TIMEOUT_EVENT
        self.ended = "upstream_dropped"
        return DROPPED_EVENT

    @property
    def stored_text(self) -> str:
        """The answer `finish` stores."""
        return self.answer.text

    async def finish(self) -> None:
        """Close the upstream and store the turns; runs once, also after a disconnect."""
        if self._finished:
            return
        self._finished = True
        await self.response.aclose()
        reason = self.ended if self.ended is not None else "client_disconnected"
        try:
            await self.on_end(self.stored_text, reason or None)
        except Exception:  # the client has its answer; storing it is best effort from here
            log.warning("storing a streamed chat answer failed", exc_info=True)


class RelayResponse(StreamingResponse):
    """A StreamingResponse that always ends with `relay.finish()`, shielded from cancellation
    (a client that disconnects cancels the stream; the store must still happen)."""

    def __init__(self, relay: Relay, headers: dict[str, str], media_type: str) -> None:
        self.relay = relay
        super().__init__(relay.chunks(), headers=headers, media_type=media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except ClientDisconnect:
            log.info("chat client disconnected mid-stream")
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                await self.relay.finish()
