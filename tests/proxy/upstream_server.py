"""A real HTTP server speaking the chat completions protocol, scripted by the test.

Each request takes the next scripted `Answer` and is recorded (headers and JSON body), so a
test can see exactly what pgrecall sent upstream. tests/extraction uses it too: answers built
from the request (`reply`), token usage, and a delay (timeouts).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GATE_TIMEOUT_S = 15


@dataclass
class Answer:
    text: str = "ok"
    status: int = 200
    error: dict[str, Any] | None = None  # the error body for a non-200 status
    stream_pieces: list[str] | None = None  # streamed answers: the deltas
    gate: threading.Event | None = None  # streams wait here after the first chunk
    drop_after: int | None = None  # streams: close the connection after this many chunks
    headers: dict[str, str] = field(default_factory=dict)
    reply: Callable[[dict[str, Any]], str] | None = None  # the text, from the request body
    usage: dict[str, int] | None = None  # replaces the default usage
    delay_s: float = 0.0  # wait before answering
    raw: bytes | None = None  # a 200 with exactly this body (garbage: not a completion)
    hang_up: bool = False  # close the connection without answering
    stall_s: float = 0.0  # streams: pause this long after the first chunk (a hung upstream)
    drip_s: float = 0.0  # headers at once, then the body one byte every drip_s (streams too)


@dataclass
class Seen:
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)  # when the request's body was read


def completion(model: str, text: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": usage or {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    event = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a timeout test) closes the socket before the answer is sent.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Upstream:
    def __init__(self) -> None:
        self.answers: deque[Answer] = deque()
        self.seen: list[Seen] = []
        self.finished = threading.Event()  # set when a stream has sent its last byte
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                upstream.seen.append(Seen({k.lower(): v for k, v in self.headers.items()}, body))
                answer = upstream.answers.popleft() if upstream.answers else Answer()
                if self.path != "/v1/chat/completions":
                    answer = Answer(status=404, error={"error": {"message": self.path}})
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                text = answer.reply(body) if answer.reply is not None else answer.text
                if answer.hang_up:
                    self.close_connection = True
                    return
                if answer.raw is not None:
                    self._bytes(200, answer.raw, "application/json", answer.drip_s)
                elif answer.status != 200:
                    self._json(answer.status, answer.error or {}, answer.headers)
                elif answer.stream_pieces is None:
                    reply = completion(body["model"], text, answer.usage)
                    self._json(200, reply, answer.headers, answer.drip_s)
                else:
                    self._stream(body["model"], answer)

            def _bytes(
                self, status: int, data: bytes, content_type: str, drip_s: float = 0.0
            ) -> None:
                self._json_bytes(status, data, {}, drip_s, content_type)

            def _json(
                self,
                status: int,
                payload: dict[str, Any],
                extra: dict[str, str],
                drip_s: float = 0.0,
            ) -> None:
                self._json_bytes(status, json.dumps(payload).encode(), extra, drip_s)

            def _json_bytes(
                self,
                status: int,
                data: bytes,
                extra: dict[str, str],
                drip_s: float,
                content_type: str = "application/json",
            ) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                if not drip_s:
                    self.wfile.write(data)
                    return
                self.wfile.flush()
                for n in range(len(data)):
                    time.sleep(drip_s)
                    self.wfile.write(data[n : n + 1])
                    self.wfile.flush()

            def _send_chunk(self, data: bytes, drip_s: float = 0.0) -> None:
                if not drip_s:
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                    return
                for n in range(len(data)):  # each byte its own chunk, drip_s apart
                    time.sleep(drip_s)
                    self.wfile.write(b"1\r\n" + data[n : n + 1] + b"\r\n")
                    self.wfile.flush()

            def _stream(self, model: str, answer: Answer) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                events = [chunk(model, {"role": "assistant", "content": ""})]
                events += [chunk(model, {"content": p}) for p in answer.stream_pieces or []]
                events += [chunk(model, {}, "stop"), b"data: [DONE]\n\n"]
                for n, event in enumerate(events):
                    if answer.drop_after is not None and n == answer.drop_after:
                        self.close_connection = True
                        upstream.finished.set()
                        return  # no terminating chunk: an incomplete chunked body
                    self._send_chunk(event, answer.drip_s if n > 0 else 0.0)
                    if n == 1 and answer.gate is not None:
                        answer.gate.wait(GATE_TIMEOUT_S)
                    if n == 1 and answer.stall_s:
                        time.sleep(answer.stall_s)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                upstream.finished.set()

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Upstream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)
