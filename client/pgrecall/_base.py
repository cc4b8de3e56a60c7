"""What the two clients share: identity headers, request building, answer reading."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx

from pgrecall._core import Call, PgrecallError, RetryPolicy

T = TypeVar("T")
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
    def __init__(
        self,
        base_url: str,
        user_id: str | None,
        api_key: str | None,
        admin_key: str | None,
        retry: RetryPolicy | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.user_id = user_id
        self.api_key = api_key
        self.admin_key = admin_key
        self.retry = retry or RetryPolicy()

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
