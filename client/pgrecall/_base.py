"""What the two clients share: identity headers, request building, answer reading."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from pgrecall._core import Call, PgrecallError, RetryPolicy

T = TypeVar("T")
B = TypeVar("B", bound="Base")
DEFAULT_TIMEOUT = 30.0


def pool(max_connections: int | None, http: object | None) -> dict[str, Any]:
    """The keyword arguments sizing the client's own connection pool: httpx's default, or
    `max_connections` connections all kept alive (a load driver holding its concurrency)."""
    if max_connections is None:
        return {}
    if http is not None:
        raise ValueError("max_connections sizes the client's own pool: size `http` instead")
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    n = max_connections
    return {"limits": httpx.Limits(max_connections=n, max_keepalive_connections=n)}


class Base:
    """What the two clients share: their options, identity headers, request building, answer
    reading. A client opens its own connection pool (`_open`) and sleeps its own way between
    retries (`_default_sleep`)."""

    _default_sleep: Callable[[float], Any]

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        user_id: str | None = None,
        api_key: str | None = None,
        admin_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        http: Any = None,
        max_connections: int | None = None,
        sleep: Callable[[float], Any] | None = None,
    ) -> None:
        """`http`: an httpx.Client (Client) or httpx.AsyncClient (AsyncClient) to use instead
        of the client's own pool; `sleep`: how to wait between retries (tests pass a fake)."""
        self.base_url = base_url.rstrip("/")
        self.user_id = user_id
        self.api_key = api_key
        self.admin_key = admin_key
        self.retry = retry or RetryPolicy()
        sizing = pool(max_connections, http)
        self._owns_http = http is None
        self._http = http or self._open(timeout, sizing)
        self._sleep = sleep or type(self)._default_sleep
        self._timeout = timeout
        self._max_connections = max_connections

    def _open(self, timeout: float, sizing: dict[str, Any]) -> Any:
        raise NotImplementedError

    def as_user(self: B, user_id: str) -> B:
        """The same client acting for another user (shares the connection pool)."""
        return type(self)(
            self.base_url,
            user_id=user_id,
            api_key=self.api_key,
            admin_key=self.admin_key,
            retry=self.retry,
            http=self._http,
            sleep=self._sleep,
        )

    def _headers(self, call: Call[Any]) -> dict[str, str]:
        headers: dict[str, str] = {}
        key = self.admin_key if call.admin and self.admin_key else self.api_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if not call.admin and self.user_id is not None:
            headers["X-User-Id"] = self.user_id
        return headers

    def _request(self, http: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
        return http.build_request(
            call.method,
            self.base_url + call.path,
            json=call.json,
            data=call.form,
            params=call.params,
            headers=self._headers(call) if call.identity else None,
        )

    @staticmethod
    def _result(call: Call[T], response: httpx.Response) -> T:
        if response.status_code not in call.expect:
            raise PgrecallError.from_response(response)
        return call.parse(response)

    @staticmethod
    def _transport_error(exc: httpx.TransportError) -> PgrecallError:
        error = PgrecallError(0, type(exc).__name__, str(exc) or repr(exc))
        error.__cause__ = exc
        return error
