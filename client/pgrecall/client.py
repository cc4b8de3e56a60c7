"""Typed HTTP client for pgrecall: `Client` (sync) and `AsyncClient`, both on httpx.

    from pgrecall.client import Client
    with Client("http://127.0.0.1:8000", user_id="alice", api_key="...") as pgr:
        conv = pgr.create_conversation("setup")
        pgr.append_message(conv.id, "user", "I prefer uv over pip")
        print(pgr.query_memory("which package manager?").formatted)

Every failure raises `PgrecallError` (status, error, detail, fields: the service's error body).
Retries (bounded, Retry-After honoured): a 503 on a read (GETs, query_memory, memory_query, the
store's get/search/namespaces) or an idempotent write (session goal, forget/rate, store put and
delete, clearing messages, admin create/update/delete/restore: the service deduplicates memories
by text), and a 503 on any other write (new conversations and messages, save_memory, popping
the newest message) only when its body says nothing was stored (DatabaseUnavailableError,
EmbeddingError); connection failures before the request was sent. `NO_RETRY`
turns retries off (load drivers measure each request once); `max_connections` sizes the
client's own pool (all of them kept alive). `client.console` drives the admin console (sign in,
pages as HTML, forms): see pgrecall/console.py.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Coroutine, Generator
from functools import cached_property
from typing import Any, Generic, TypeVar

import httpx

from pgrecall._base import Base
from pgrecall._calls import TimeFilters
from pgrecall._core import NO_RETRY, PgrecallError, RetryPolicy
from pgrecall.aio import AsyncClient
from pgrecall.console import Console, ConsolePage

__all__ = [
    "NO_RETRY",
    "AsyncClient",
    "Client",
    "ConsolePage",
    "PgrecallError",
    "RetryPolicy",
    "TimeFilters",
]

T = TypeVar("T")


class Client(Base):
    """Synchronous client; `as_user` gives a view for another user on the same connections.

    Its methods are AsyncClient's (pgrecall/aio.py, the one place a route is written), made
    synchronous when this module is imported (`_derive`, at the end of the file): a method added
    there is a method here, with the same name, arguments and docstring.
    """

    _default_sleep = staticmethod(time.sleep)

    def _open(self, timeout: float, sizing: dict[str, Any]) -> httpx.Client:
        return httpx.Client(timeout=timeout, **sizing)

    @cached_property
    def console(self) -> Console:
        """The admin console (sign in with the admin key, fetch pages, post forms)."""
        return Console(self)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _Ready(Generic[T]):
    """An answer already in hand, awaitable without suspending (what `_derive` feeds back)."""

    def __init__(self, value: T) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, T]:
        return self.value
        yield  # a generator that never suspends


class _Http:
    """The sync client's connection pool as AsyncClient's code awaits it."""

    def __init__(self, http: httpx.Client) -> None:
        self._inner = http

    def send(self, request: httpx.Request) -> _Ready[httpx.Response]:
        return _Ready(self._inner.send(request))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Runner:
    """The sync client as AsyncClient's methods see it: its requests and sleeps answer at
    once, the source's coroutine methods (`_run` included) run on this runner too, anything else
    is the client's."""

    def __init__(self, client: Client, source: type[AsyncClient]) -> None:
        self._client = client
        self._source = source
        self._http = _Http(client._http)

    def _sleep(self, delay: float) -> _Ready[None]:
        return _Ready(self._client._sleep(delay))

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._source, name, None)
        if inspect.iscoroutinefunction(member):
            return functools.partial(member, self)
        return getattr(self._client, name)


def _synchronous(
    method: Callable[..., Coroutine[Any, Any, T]], source: type[AsyncClient]
) -> Callable[..., T]:
    """AsyncClient's `method` as a Client method: its coroutine is driven to the end at once,
    each `await self._run(call)` answered by the sync client's request."""

    @functools.wraps(method)
    def run(self: Client, *args: Any, **kwargs: Any) -> T:
        coroutine = method(_Runner(self, source), *args, **kwargs)
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        coroutine.close()
        raise RuntimeError(f"AsyncClient.{method.__name__} awaits more than its calls")

    return run


# What the two clients do differently: the connection, closing, and running in an event loop.
_OWN = {"aclose", "for_app"}


def _derive(target: type[Client], source: type[AsyncClient]) -> None:
    """Give Client every public method of AsyncClient (pgrecall/aio.py is the source), and its
    request loop with the retry rule (`_run`, which the console runs too)."""
    target._run = _synchronous(source._run, source)  # type: ignore[method-assign]
    for name in dir(source):
        member = getattr(source, name)
        if not name.startswith("_") and name not in _OWN and inspect.iscoroutinefunction(member):
            setattr(target, name, _synchronous(member, source))


_derive(Client, AsyncClient)
