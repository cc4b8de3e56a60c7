"""Recall tags: memory lookups for models without tool calling (opt-in, `memory.recall_tags`).

The model is told it may write `<recall>what to look up</recall>`. When its answer holds one,
the proxy cuts the answer after the tag, runs `query_memory` for the tag's text and asks the
upstream to continue with the result in `<memo>...</memo>`: the answer so far goes back as an
assistant message, the memo as a system message after it. At most `recall_rounds` lookups per
request; a tag after the last one is removed, not run. Only the upstream's output is read for
tags: nothing a user (or a stored memory) writes can start a lookup, and memos neutralise tags
in the memories they quote.

The client gets one answer: without the tags (default), or with the tags and memos where they
happened (`memory.show_tags`). Streaming included: text that could be the start of a tag is
held back until it is known not to be one.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.deadline import Deadline
from app.errors import ServiceError, UpstreamError
from app.proxy.schemas import answer_text, with_system_message
from app.proxy.stream import DROPPED_EVENT, NO_ANSWER_EVENT, TIMEOUT_EVENT, OnEnd, Relay
from app.proxy.upstream import ChatUpstream

log = logging.getLogger(__name__)

OPEN, CLOSE = "<recall>", "</recall>"
_TAG = re.compile(r"<recall>(.*?)</recall>", re.DOTALL)
# A tag (or memo delimiter) inside quoted memories is text, not a tag.
_NEUTRALISE = re.compile(r"<(\s*/?\s*(?:recall|memo)\b)", re.IGNORECASE)
MAX_QUERY_CHARS = 1000

INSTRUCTIONS = (
    "You can look up what is known about the user. To do so, write "
    "<recall>what to look up</recall> and stop: the result comes back as <memo>...</memo> "
    "and you then continue your answer from where you stopped, without repeating it. "
    "Look up only what the memories you were given do not already answer."
)
CONTINUE = "Continue your answer from where it stopped; do not repeat what you wrote."

# (memo block or None when nothing was found, the ids of the memories in it)
Lookup = Callable[[str], Awaitable[tuple[str | None, list[str]]]]


def with_instructions(body: dict[str, Any]) -> dict[str, Any]:
    """The body with the recall instructions as a system message after the leading ones."""
    return with_system_message(body, INSTRUCTIONS)


def memo(block: str | None) -> str:
    """The lookup's result as the model reads it."""
    inner = _NEUTRALISE.sub(r"&lt;\1", block) if block else "(no memories found)"
    return f"<memo>\n{inner}\n</memo>"


def strip_tags(text: str) -> str:
    """The text without recall tags (a tag past the last round is dropped, not run)."""
    return _TAG.sub("", text)


def continued(body: dict[str, Any], said: str, memo_text: str) -> dict[str, Any]:
    """The next round's body: the answer so far (through the tag), then the memo."""
    messages = [
        *body["messages"],
        {"role": "assistant", "content": said},
        {"role": "system", "content": f"{memo_text}\n{CONTINUE}"},
    ]
    return {**body, "messages": messages}


def query_of(tag_text: str) -> str:
    return " ".join(tag_text.split())[:MAX_QUERY_CHARS]


async def recall(lookup: Lookup, tag_text: str) -> tuple[str, list[str]]:
    """The memo for a tag, and the ids of the memories in it. A lookup that fails (database
    or embedder away) says so in the memo: the answer under way cannot become a 503."""
    try:
        block, ids = await lookup(query_of(tag_text))
    except ServiceError as exc:
        log.warning("recall tag lookup failed: %s", exc.message)
        return "<memo>\n(the memory lookup failed)\n</memo>", []
    return memo(block), ids


@dataclass
class Transcript:
    """What the rounds produced: the clean answer, and the one with tags and memos."""

    clean: list[str] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    memory_ids: list[str] = field(default_factory=list)
    rounds: int = 0  # lookups run

    def text(self, show_tags: bool) -> str:
        return "".join(self.shown if show_tags else self.clean)


# --- non-streaming -------------------------------------------------------------------------


@dataclass
class Finished:
    """The last upstream answer (status, headers, JSON) and the transcript of all rounds;
    `answered` is False when a 200 was not a chat completion or said nothing (the caller's
    502)."""

    response: httpx.Response
    content: bytes
    transcript: Transcript
    answered: bool = True


async def complete(
    upstream: ChatUpstream,
    body: dict[str, Any],
    headers: dict[str, str],
    lookup: Lookup,
    max_rounds: int,
    deadline: Deadline,
) -> Finished:
    """Run rounds until an answer without a tag (or the cap); an upstream error (raised or
    answered) or a body that is not a completion ends them, in any round."""
    transcript = Transcript()
    body = with_instructions(body)
    usage: dict[str, int] = {}
    while True:
        response = await upstream.send(body, headers, deadline)
        content = await upstream.read(response, deadline)
        if response.status_code >= 400:
            return Finished(response, content, transcript)
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        message = _message(data)
        if message is None or answer_text(message) is None:
            return Finished(response, content, transcript, answered=False)
        _add_usage(usage, data.get("usage"))
        text = message.get("content")
        found = _TAG.search(text) if isinstance(text, str) else None
        if not isinstance(text, str) or found is None or transcript.rounds >= max_rounds:
            if isinstance(text, str):  # (none: e.g. tool calls only, passed on as they are)
                transcript.clean.append(strip_tags(text))
                transcript.shown.append(text)
                message["content"] = transcript.text(show_tags=False)
            if usage:
                data["usage"] = usage
            return Finished(response, json.dumps(data).encode(), transcript)
        memo_text, ids = await recall(lookup, found.group(1))
        transcript.rounds += 1
        transcript.memory_ids += [i for i in ids if i not in transcript.memory_ids]
        transcript.clean.append(strip_tags(text[: found.start()]))
        transcript.shown.append(text[: found.end()] + memo_text)
        body = continued(body, text[: found.end()], memo_text)


def finished_content(finished: Finished, show_tags: bool) -> bytes:
    """The JSON the client gets: the last answer with the whole transcript as its content."""
    if not show_tags or finished.response.status_code >= 400:
        return finished.content
    data = json.loads(finished.content)
    data["choices"][0]["message"]["content"] = finished.transcript.text(show_tags=True)
    return json.dumps(data).encode()


def _message(data: Any) -> dict[str, Any] | None:
    """The completion's first message; None when `data` is not a chat completion."""
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    return message if isinstance(message, dict) else None


def _add_usage(total: dict[str, int], usage: Any) -> None:
    """Usage summed over the rounds (what the request cost upstream)."""
    if not isinstance(usage, dict):
        return
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if isinstance(usage.get(key), int):
            total[key] = total.get(key, 0) + usage[key]


# --- streaming -----------------------------------------------------------------------------


class TagScanner:
    """Feeds streamed text; says what can be shown now and when a whole tag has arrived.

    Text that could still become `<recall>` is held back (at most len("<recall>") - 1
    characters outside a tag), and everything from an opening tag on, until it closes.
    """

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, text: str) -> tuple[str, re.Match[str] | None]:
        """(text safe to show, a complete tag in the pending text or None)."""
        self.pending += text
        found = _TAG.search(self.pending)
        if found is not None:
            return "", found
        start = self.pending.find(OPEN)
        if start >= 0:  # inside an open tag: show what came before it
            safe, self.pending = self.pending[:start], self.pending[start:]
            return safe, None
        keep = _partial_open(self.pending)
        safe = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(self.pending) - keep :]
        return safe, None

    def flush(self) -> str:
        """The end of the stream: held text is shown (an unclosed tag is text)."""
        rest, self.pending = self.pending, ""
        return rest


def _partial_open(text: str) -> int:
    """How many characters at the end of `text` are a proper prefix of `<recall>`."""
    for n in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-n:]):
            return n
    return 0


def _events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE `data:` payloads in the buffer, and the rest."""
    *lines, rest = buffer.split(b"\n")
    payloads = [line.strip()[5:].strip() for line in lines if line.strip().startswith(b"data:")]
    return payloads, rest


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


class RecallRelay(Relay):
    """Streams the rounds to the client as one answer; stores the clean text at the end."""

    def __init__(
        self,
        upstream: ChatUpstream,
        first: httpx.Response,
        body: dict[str, Any],
        headers: dict[str, str],
        lookup: Lookup,
        max_rounds: int,
        show_tags: bool,
        on_end: OnEnd,
        deadline: Deadline,
    ) -> None:
        super().__init__(first, on_end, deadline)
        self.upstream = upstream
        self.body = body
        self.headers = headers
        self.lookup = lookup
        self.max_rounds = max_rounds
        self.show_tags = show_tags
        self.transcript = Transcript()
        self._template: dict[str, Any] | None = None  # the first chunk's id, model, ...

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        event = dict(self._template or {"object": "chat.completion.chunk"})
        event["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return _sse(event)

    def _text(self, clean: str, shown: str | None = None) -> bytes:
        self.transcript.clean.append(clean)
        self.transcript.shown.append(clean if shown is None else shown)
        out = clean if shown is None or not self.show_tags else shown
        return self._chunk({"content": out}) if out else b""

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._rounds():
                if piece:
                    yield piece
        except (httpx.TransportError, TimeoutError) as exc:
            yield self.cut(exc)
        else:
            if self.ended is None:
                self.ended = ""

    async def _rounds(self) -> AsyncIterator[bytes]:
        started = False
        while True:
            capped = self.transcript.rounds >= self.max_rounds
            scanner = TagScanner()
            said = ""  # this round's text shown so far (what the model wrote, before a tag)
            found: re.Match[str] | None = None
            finish: str | None = None
            buffer = b""
            events = 0
            async for raw in self.deadline.chunks(self.response.aiter_bytes()):
                payloads, buffer = _events(buffer + raw)
                for payload in payloads:
                    try:
                        event = json.loads(payload)
                        choice = event["choices"][0]
                    except (ValueError, KeyError, IndexError, TypeError):
                        continue  # [DONE] too: the relay sends its own at the very end
                    events += 1
                    if self._template is None:
                        self._template = {k: v for k, v in event.items() if k != "choices"}
                    delta = choice.get("delta") or {}
                    if not started and delta.get("role"):
                        started = True
                        yield self._chunk({"role": delta["role"], "content": ""})
                    finish = choice.get("finish_reason") or finish
                    text = delta.get("content")
                    if not isinstance(text, str) or found is not None:
                        continue
                    safe, found = scanner.feed(text)
                    while found is not None and capped:
                        # Past the last round a tag is removed, not run; the stream goes on.
                        tag_end = found.end()
                        held, scanner.pending = scanner.pending[:tag_end], scanner.pending[tag_end:]
                        yield self._text(safe + strip_tags(held), safe + held)
                        said += safe + held
                        safe, found = scanner.feed("")
                    if safe:
                        said += safe
                        yield self._text(safe)
                if found is not None:
                    break
            if events == 0:  # ended cleanly with no completion event at all (e.g. garbage)
                self.ended = "no_answer"
                yield NO_ANSWER_EVENT
                return
            if found is None:
                rest = scanner.flush()
                if rest:
                    yield self._text(rest)
                yield self._chunk({}, finish or "stop")
                yield b"data: [DONE]\n\n"
                return
            await self.response.aclose()
            before, tag = scanner.pending[: found.start()], found.group(0)
            if before:
                yield self._text(before)
            memo_text, ids = await recall(self.lookup, found.group(1))
            self.transcript.rounds += 1
            self.transcript.memory_ids += [i for i in ids if i not in self.transcript.memory_ids]
            yield self._text("", tag + memo_text)
            self.body = continued(self.body, said + before + tag, memo_text)
            try:
                response = await self.upstream.send(self.body, self.headers, self.deadline)
            except UpstreamError as exc:  # unreachable or timed out: the answer so far stays
                log.warning("chat upstream failed a recall round: %s", exc.message)
                self.ended = "upstream_timeout" if exc.reason == "timeout" else "upstream_failed"
                yield TIMEOUT_EVENT if exc.reason == "timeout" else DROPPED_EVENT
                return
            if response.status_code >= 400:
                await response.aclose()
                log.warning("chat upstream answered %d to a recall round", response.status_code)
                self.ended = "upstream_failed"
                yield DROPPED_EVENT
                return
            self.response = response

    @property
    def clean_text(self) -> str:
        return self.transcript.text(show_tags=False)

    @property
    def stored_text(self) -> str:
        """The clean answer of all rounds, without the tags and memos."""
        return self.clean_text
