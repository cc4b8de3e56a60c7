"""The admin console over HTTP, as a browser drives it: sign in, fetch pages, post forms.

The console is HTML for people, so this API does not parse pages: a page comes back as its
status and HTML text. It exists for scripts that exercise the console the way an admin does
(scripts/bench_console.py times its pages) without HTTP code of their own.

    with Client(base_url, admin_key="...") as pgr:
        pgr.console.login()                      # the form's nonce, the key, then the CSRF token
        page = pgr.console.page("/users", {"q": "alice"})
        answer = pgr.console.submit("/ask", {"query": "what does alice use?"}, {"user": "alice"})

Signing in keeps the session cookie in the client's connection pool (`as_user` views share it).
Console requests carry neither the client's bearer key nor its user id: the cookie is the
credential, as in a browser.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx

from pgrecall._core import Call, PgrecallError

T = TypeVar("T")


# What the console needs of its client: its admin key and its transport loop. Protocols rather
# than the client classes, so this module imports neither client (they import it).
class SyncRunner(Protocol):
    admin_key: str | None

    def _run(self, call: Call[T]) -> T: ...


class AsyncRunner(Protocol):
    admin_key: str | None

    async def _run(self, call: Call[T]) -> T: ...


PREFIX = "/console"
_NONCE = re.compile(r'name="nonce" value="([^"]*)"')
_CSRF = re.compile(r'name="csrf_token" value="([^"]*)"')


@dataclass(frozen=True)
class ConsolePage:
    """One answer of the console: status, HTML, and where a redirect points (303 after a form)."""

    status: int
    html: str
    location: str | None = None


def _path(path: str) -> str:
    # Paths are inside the console ("/users" is /console/users): never another route or host.
    if not path.startswith("/") or path.startswith("//"):
        raise ValueError(f"a console path starts with a single '/': {path!r}")
    return PREFIX + path


def _page(response: httpx.Response) -> ConsolePage:
    return ConsolePage(response.status_code, response.text, response.headers.get("location"))


def _hidden_field(pattern: re.Pattern[str], name: str) -> Callable[[httpx.Response], str]:
    def parse(response: httpx.Response) -> str:
        match = pattern.search(response.text)
        if match is None:
            raise PgrecallError(
                response.status_code,
                "ConsoleFormError",
                f"no {name} field on {response.request.url.path}",
            )
        return html.unescape(match.group(1))

    return parse


def login_form() -> Call[str]:
    """The sign-in page; its answer is the form's nonce (its cookie goes to the pool)."""
    return Call(
        "GET", _path("/login"), _hidden_field(_NONCE, "nonce"), identity=False, idempotent=True
    )


def sign_in(nonce: str, admin_key: str) -> Call[ConsolePage]:
    # The nonce is spent by this post: never repeated.
    return Call(
        "POST",
        _path("/login"),
        _page,
        form={"nonce": nonce, "admin_key": admin_key},
        identity=False,
        expect=frozenset({303}),
    )


def csrf_token() -> Call[str]:
    """The session's CSRF token, read from the user directory (every signed-in page has it)."""
    return Call(
        "GET", _path("/users"), _hidden_field(_CSRF, "csrf_token"), identity=False, idempotent=True
    )


def page(path: str, params: Mapping[str, Any] | None) -> Call[ConsolePage]:
    return Call(
        "GET",
        _path(path),
        _page,
        params=params,
        identity=False,
        idempotent=True,
        expect=frozenset({200}),
    )


def submit(
    path: str, fields: Mapping[str, str], params: Mapping[str, Any] | None, csrf: str
) -> Call[ConsolePage]:
    # Console forms change data (purge, restore, ...): a post is never repeated.
    return Call(
        "POST",
        _path(path),
        _page,
        params=params,
        form={**fields, "csrf_token": csrf},
        identity=False,
        expect=frozenset({200, 303}),
    )


def _key(given: str | None, configured: str | None) -> str:
    key = given or configured
    if not key:
        raise ValueError("the console signs in with an admin key: pass one or set admin_key")
    return key


class _State:
    csrf: str | None = None

    def _token(self) -> str:
        if self.csrf is None:
            raise RuntimeError("sign in first: console.login()")
        return self.csrf


class Console(_State):
    """`Client.console`: the admin console, signed in with an admin key."""

    def __init__(self, client: SyncRunner) -> None:
        self._client = client

    def login(self, admin_key: str | None = None) -> None:
        """Sign in (the client's admin key unless one is given); PgrecallError when refused."""
        key = _key(admin_key, self._client.admin_key)
        nonce = self._client._run(login_form())
        self._client._run(sign_in(nonce, key))
        self.csrf = self._client._run(csrf_token())

    def page(self, path: str, params: Mapping[str, Any] | None = None) -> ConsolePage:
        """GET a console page ("/users" is /console/users); PgrecallError unless 200."""
        return self._client._run(page(path, params))

    def submit(
        self,
        path: str,
        fields: Mapping[str, str],
        params: Mapping[str, Any] | None = None,
    ) -> ConsolePage:
        """POST a console form with the session's CSRF token; the page or the 303."""
        return self._client._run(submit(path, fields, params, self._token()))


class AsyncConsole(_State):
    """`AsyncClient.console`: the same as `Console`, awaited."""

    def __init__(self, client: AsyncRunner) -> None:
        self._client = client

    async def login(self, admin_key: str | None = None) -> None:
        """Sign in (the client's admin key unless one is given); PgrecallError when refused."""
        key = _key(admin_key, self._client.admin_key)
        nonce = await self._client._run(login_form())
        await self._client._run(sign_in(nonce, key))
        self.csrf = await self._client._run(csrf_token())

    async def page(self, path: str, params: Mapping[str, Any] | None = None) -> ConsolePage:
        """GET a console page ("/users" is /console/users); PgrecallError unless 200."""
        return await self._client._run(page(path, params))

    async def submit(
        self,
        path: str,
        fields: Mapping[str, str],
        params: Mapping[str, Any] | None = None,
    ) -> ConsolePage:
        """POST a console form with the session's CSRF token; the page or the 303."""
        return await self._client._run(submit(path, fields, params, self._token()))
