"""What the two clients share: identity headers, request building, answer reading."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import httpx

from pgrecall._core import Call, PgrecallError, RetryPolicy

T = TypeVar("T")
B = TypeVar("B", bound="Base")
DEFAULT_TIMEOUT = 30.0
SCOPE_MODES = ("inherit", "own")


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
        agent_id: str | None = None,
        run_id: str | None = None,
        scope_mode: str | None = None,
        spaces: Sequence[str] | str | None = None,
    ) -> None:
        """`http`: an httpx.Client (Client) or httpx.AsyncClient (AsyncClient) to use instead
        of the client's own pool; `sleep`: how to wait between retries (tests pass a fake).

        The memory scope (docs/agents.md, "Scopes and shared spaces"), sent on every call for
        the user (X-Agent-Id, X-Run-Id, X-Scope-Mode, X-Spaces; never on admin calls):
        `agent_id` and `run_id` keep the agent's (run's) memory apart from other agents' (runs');
        `scope_mode` "own" reads only that agent's (run's) memory, "inherit" (the service's
        default) the user's unscoped memory too; `spaces` names shared spaces a query reads
        besides (each needs the user's grant)."""
        if scope_mode is not None and scope_mode not in SCOPE_MODES:
            raise ValueError("scope_mode must be 'inherit' or 'own'")
        self.base_url = base_url.rstrip("/")
        self.user_id = user_id
        self.agent_id = agent_id
        self.run_id = run_id
        self.scope_mode = scope_mode
        self.spaces: tuple[str, ...] = (
            tuple(s.strip() for s in spaces.split(","))
            if isinstance(spaces, str)
            else tuple(spaces or ())
        )
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

    def _scope(self) -> dict[str, Any]:
        """The client's memory scope as keyword arguments of the constructor."""
        return {
            "agent_id": self.agent_id,
            "run_id": self.run_id,
            "scope_mode": self.scope_mode,
            "spaces": self.spaces,
        }

    def as_user(self: B, user_id: str) -> B:
        """The same client acting for another user, in the same scope (shares the connection
        pool)."""
        return self._view(user_id, self._scope())

    def scoped(
        self: B,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        scope_mode: str | None = None,
        spaces: Sequence[str] | str | None = None,
    ) -> B:
        """The same client (user, keys, connection pool) in another memory scope: this agent,
        run, mode and spaces instead of the client's."""
        scope = {"agent_id": agent_id, "run_id": run_id, "scope_mode": scope_mode}
        return self._view(self.user_id, {**scope, "spaces": spaces})

    def _view(self: B, user_id: str | None, scope: dict[str, Any]) -> B:
        return type(self)(
            self.base_url,
            user_id=user_id,
            api_key=self.api_key,
            admin_key=self.admin_key,
            retry=self.retry,
            http=self._http,
            sleep=self._sleep,
            **scope,
        )

    def _headers(self, call: Call[Any]) -> dict[str, str]:
        headers: dict[str, str] = {}
        key = self.admin_key if call.admin and self.admin_key else self.api_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if not call.admin:
            if self.user_id is not None:
                headers["X-User-Id"] = self.user_id
            headers.update(self._scope_headers())
        return headers

    def _scope_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.agent_id is not None:
            headers["X-Agent-Id"] = self.agent_id
        if self.run_id is not None:
            headers["X-Run-Id"] = self.run_id
        if self.scope_mode is not None:
            headers["X-Scope-Mode"] = self.scope_mode
        if self.spaces:
            headers["X-Spaces"] = ",".join(self.spaces)
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
