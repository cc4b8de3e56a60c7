"""The model upstream: one httpx client owned by the lifespan, and how requests reach it.

Every proxied request gets one `Deadline` of PGRECALL_CHAT_UPSTREAM_TIMEOUT_S over all it asks
the upstream (connect, headers, every chunk of the body, every recall round): past it the
client gets 504 (or, on a stream already under way, an error event) and the user's turn is
kept, marked `timeout` (`upstream_timeout` on a stream)."""

from __future__ import annotations

from typing import Any

import httpx

from app.config import Settings
from app.deadline import Deadline
from app.errors import UpstreamError
from app.services.api_keys import looks_like_key

# Headers of the caller that mean something to an OpenAI-compatible upstream.
PASSED_HEADERS = ("openai-organization", "openai-project")


class ChatUpstream:
    """POSTs chat completions to `<url>/chat/completions`."""

    def __init__(self, url: str | None, key: str | None, timeout_s: float) -> None:
        self.url = url
        self.key = key
        self.timeout_s = timeout_s
        # Each operation's own timeout is the deadline's length too: the deadline is the bound.
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatUpstream:
        key = settings.chat_upstream_key
        return cls(
            settings.chat_upstream_url,
            key.get_secret_value() if key else None,
            settings.chat_upstream_timeout_s,
        )

    @property
    def enabled(self) -> bool:
        return self.url is not None

    def require(self) -> None:
        if self.url is None:
            raise UpstreamError("chat proxy is off: set PGRECALL_CHAT_UPSTREAM_URL", 501)

    def deadline(self) -> Deadline:
        """The deadline of one proxied request, from now."""
        return Deadline(self.timeout_s)

    def timed_out(self) -> UpstreamError:
        return UpstreamError(
            f"chat upstream did not answer within {self.timeout_s:g} s "
            "(PGRECALL_CHAT_UPSTREAM_TIMEOUT_S)",
            504,
            "timeout",
        )

    def headers(self, caller: httpx.Headers | Any) -> dict[str, str]:
        """The configured key, else the caller's Authorization (it belongs to the upstream),
        unless it carries a pgrecall per-user key (app/proxy/auth.py)."""
        headers = {"accept-encoding": "identity"}
        if self.key is not None:
            headers["authorization"] = f"Bearer {self.key}"
        elif caller.get("authorization") and not _is_pgrecall_key(caller["authorization"]):
            headers["authorization"] = caller["authorization"]
        for name in PASSED_HEADERS:
            if caller.get(name):
                headers[name] = caller[name]
        return headers

    async def send(
        self, body: dict[str, Any], headers: dict[str, str], deadline: Deadline
    ) -> httpx.Response:
        """Start the request (connected, headers read, by the deadline); the body is read (or
        streamed, `deadline.chunks`) by the caller, who closes it."""
        request = self.http.build_request(
            "POST", f"{self.url}/chat/completions", json=body, headers=headers
        )
        try:
            return await deadline.wait(self.http.send(request, stream=True))
        except (TimeoutError, httpx.TimeoutException):
            raise self.timed_out() from None
        except httpx.TransportError as exc:
            # Refused or unresolvable: unreachable; a connection closed without an answer: dropped.
            reason = "unreachable" if isinstance(exc, httpx.ConnectError) else "dropped"
            raise UpstreamError(
                f"chat upstream failed: {type(exc).__name__}", 502, reason
            ) from None

    async def read(self, response: httpx.Response, deadline: Deadline) -> bytes:
        """The whole body, by the deadline; the response is closed either way."""
        try:
            return await deadline.wait(response.aread())
        except (TimeoutError, httpx.TimeoutException):
            raise self.timed_out() from None
        except httpx.TransportError as exc:
            raise UpstreamError(
                f"chat upstream failed: {type(exc).__name__}", 502, "dropped"
            ) from None
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()


def _is_pgrecall_key(authorization: str) -> bool:
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and looks_like_key(token.strip())
