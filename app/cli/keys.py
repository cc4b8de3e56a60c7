"""`pgrecall keys`: per-user API keys (create prints the token once; list; revoke).

A running service answers first, through its admin API (/v1/admin/keys): that takes a fraction
of a second where starting the embedded database for one row takes seconds. When nothing answers
at the service's address (PGRECALL_HOST/PGRECALL_PORT, or --server) within a short connect
timeout, the command works on the database itself like the admin commands (the configured
database or the embedded one, migrated first) through the shared runner in app/cli/common.py.

Start-up is kept cheap on the HTTP path: this module imports only the standard library, typer
and app.cli.common at load time; the database stack (sqlalchemy, the models, the services) is
imported inside the fallback, and app/cli/__init__.py runs this group without assembling the rest
of the CLI (which would import the server stack).
"""

from __future__ import annotations

import http.client
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlencode, urlsplit

import typer

from app.cli.common import checked_user, fail, settings_or_exit

if TYPE_CHECKING:
    from app.config import Settings

# add_completion off: `pgrecall keys` runs this group alone (app/cli/__init__.py), and the
# assembled command has none either.
keys_app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="per-user API keys (the key fixes the user)"
)

READ, WRITE = "read", "write"  # app.services.api_keys's scopes (tests check they agree)
# Long enough for a loaded machine to accept a local connection, short enough that the fallback
# to the database is not noticeably delayed when no service listens.
CONNECT_TIMEOUT_S = 0.5
# The answer itself: one row written in a transaction.
ANSWER_TIMEOUT_S = 30.0

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="the running service's base URL (default: http://PGRECALL_HOST:PGRECALL_PORT); "
        "when nothing answers there the command works on the database itself",
    ),
]


# -- the running service ---------------------------------------------------------------------


class Unreachable(Exception):
    """Nothing answered at the service's address (or it refused the admin key)."""


@dataclass(frozen=True)
class Server:
    base: str
    admin_key: str | None

    @classmethod
    def from_settings(cls, settings: Settings, override: str | None) -> Server:
        if override is not None:
            base = override.rstrip("/")
        else:
            # A service bound to every interface is reached on loopback.
            host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
            host = f"[{host}]" if ":" in host else host
            base = f"http://{host}:{settings.port}"
        key = settings.admin_api_key.get_secret_value() if settings.admin_api_key else None
        return cls(base, key)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The JSON answer of a 2xx; Unreachable when nothing answers; exit 1 on an error."""
        parts = urlsplit(self.base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise fail(f"--server {self.base!r}: expected http://host:port", 2)
        connection_class = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        connection = connection_class(parts.hostname, parts.port, timeout=CONNECT_TIMEOUT_S)
        headers = {"Accept": "application/json"}
        if self.admin_key is not None:
            headers["Authorization"] = f"Bearer {self.admin_key}"
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            try:
                connection.connect()
            except OSError as exc:  # refused, timed out, no route, unknown host
                raise Unreachable(str(exc)) from None
            assert connection.sock is not None
            connection.sock.settimeout(ANSWER_TIMEOUT_S)
            try:
                connection.request(method, parts.path.rstrip("/") + path, payload, headers)
                response = connection.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException) as exc:
                raise fail(f"{self.base}: {exc}") from None
        finally:
            connection.close()
        if response.status in (401, 403):
            # Keys configured without this admin key: the database path still works locally.
            raise Unreachable(f"{self.base} refused the admin key ({response.status})")
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = None
        if 200 <= response.status < 300 and answer is not None:
            return answer
        detail = answer.get("detail") if isinstance(answer, dict) else None
        raise fail(f"{self.base}: {response.status} {detail or raw[:200].decode(errors='replace')}")


def _local_database(remote: Server) -> None:
    """Say which database the command works on now that no service answered; refuse an
    embedded one that does not exist yet (run outside the service's directory, the command would
    otherwise create a new ./.data database and print a token the running service never
    learns)."""
    settings = settings_or_exit(quiet=True)
    if settings.database_url is not None:
        from sqlalchemy.engine import make_url

        where = make_url(settings.database_url).render_as_string(hide_password=True)
    else:
        data_dir = settings.data_dir.expanduser().resolve()
        if not (data_dir / "pg" / "PG_VERSION").exists():
            raise fail(
                f"no service answered at {remote.base}, and there is no database in {data_dir} "
                "(PGRECALL_DATA_DIR): run this where the service runs, set PGRECALL_DATA_DIR or "
                "PGRECALL_DATABASE_URL to its database, or pass --server"
            )
        where = f"the embedded database in {data_dir}"
    typer.echo(f"no service answered at {remote.base}: using {where}", err=True)


def _server(override: str | None) -> Server:
    """The service to ask first; logging stays at WARNING so success prints only the result."""
    return Server.from_settings(settings_or_exit(quiet=True), override)


def _parse_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M}"


@dataclass(frozen=True)
class KeyRow:
    """A key as both paths print it (the ORM row or the admin API's KeyOut)."""

    id: uuid.UUID
    prefix: str
    user_id: str
    scope: str
    created_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KeyRow:
        return cls(
            uuid.UUID(data["id"]),
            data["prefix"],
            data["user_id"],
            data["scope"],
            _parse_time(data.get("created_at")),
            _parse_time(data.get("expires_at")),
            _parse_time(data.get("revoked_at")),
            _parse_time(data.get("last_used_at")),
        )

    @classmethod
    def from_model(cls, key: Any) -> KeyRow:
        return cls(
            key.id,
            key.prefix,
            key.user_id,
            key.scope,
            key.created_at,
            key.expires_at,
            key.revoked_at,
            key.last_used_at,
        )

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= datetime.now(UTC):
            return "expired"
        return "active"


# -- the commands ----------------------------------------------------------------------------


@keys_app.command("create")
def keys_create(
    user: Annotated[str, typer.Option("--user", help="the user the key acts for")],
    scope: Annotated[str, typer.Option("--scope", help="read or write")] = WRITE,
    expires: Annotated[
        str | None, typer.Option("--expires", help="lifetime such as 30d, 12h, 90m, 2w")
    ] = None,
    server: ServerOption = None,
) -> None:
    """Create a key; its token is printed once and cannot be shown again."""
    user_id = checked_user(user)
    if scope not in (READ, WRITE):
        raise fail("--scope must be read or write", 2)
    remote = _server(server)
    try:
        body = {"user_id": user_id, "scope": scope, "expires_in": expires}
        answer = remote.call("POST", "/v1/admin/keys", body)
        token, key = answer["token"], KeyRow.from_json(answer["key"])
    except Unreachable:
        _local_database(remote)
        token, key = _create_in_database(user_id, scope, expires)
    typer.echo(token)
    typer.echo(
        f"key {key.id} for user {key.user_id}, scope {key.scope}, expires "
        f"{_when(key.expires_at) if key.expires_at else 'never'}; store the token now: "
        "only its hash is kept",
        err=True,
    )


@keys_app.command("list")
def keys_list(
    user: Annotated[str | None, typer.Option("--user", help="only this user's keys")] = None,
    server: ServerOption = None,
) -> None:
    """List keys (never the tokens), newest first."""
    user_id = checked_user(user) if user is not None else None
    remote = _server(server)
    try:
        keys = _list_remote(remote, user_id)
    except Unreachable:
        _local_database(remote)
        keys = _list_in_database(user_id)
    for key in keys:
        typer.echo(
            f"{key.id}  {key.prefix}...  {key.user_id}  {key.scope:<5}  {key.state:<7}  "
            f"created {_when(key.created_at)}  expires {_when(key.expires_at)}  "
            f"last used {_when(key.last_used_at)}"
        )
    typer.echo(f"{len(keys)} keys", err=True)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[uuid.UUID, typer.Argument(help="the key's id")],
    server: ServerOption = None,
) -> None:
    """Revoke a key for good; a running service refuses it within PGRECALL_KEY_CACHE_TTL_S."""
    remote = _server(server)
    try:
        key = KeyRow.from_json(remote.call("POST", f"/v1/admin/keys/{key_id}/revoke"))
    except Unreachable:
        _local_database(remote)
        key = _revoke_in_database(key_id)
    typer.echo(f"revoked {key.id} (user {key.user_id}) at {_when(key.revoked_at)}")


def _list_remote(remote: Server, user_id: str | None) -> list[KeyRow]:
    """Every page of the admin API's list."""
    keys: list[KeyRow] = []
    offset: int | None = 0
    while offset is not None:
        query: dict[str, str | int] = {"limit": 500, "offset": offset}
        if user_id is not None:
            query["user_id"] = user_id
        page = remote.call("GET", f"/v1/admin/keys?{urlencode(query)}")
        keys.extend(KeyRow.from_json(item) for item in page["items"])
        offset = page["next_offset"]
    return keys


# -- the database path (no service answered) -------------------------------------------------
# The imports live inside these functions: they pull in sqlalchemy, the models and the services,
# which the HTTP path above must not pay for at start-up.


def _create_in_database(user_id: str, scope: str, expires: str | None) -> tuple[str, KeyRow]:
    from app.cli.common import Runtime, run
    from app.runtime import user_transaction
    from app.services.api_keys import ApiKeyService, CreatedKey, parse_duration

    try:
        lifetime = parse_duration(expires) if expires is not None else None
    except ValueError as exc:
        raise fail(f"--expires {exc}", 2) from None

    async def work(rt: Runtime) -> CreatedKey:
        async with user_transaction(rt.sessionmaker, user_id) as session:
            return await ApiKeyService(session).create(user_id, scope, lifetime)

    created = run(work, quiet=True)
    return created.token, KeyRow.from_model(created.key)


def _list_in_database(user_id: str | None) -> list[KeyRow]:
    from app.cli.common import Runtime, run
    from app.runtime import admin_transaction, user_transaction
    from app.services.api_keys import ApiKeyService

    async def work(rt: Runtime) -> list[KeyRow]:
        scoped = (
            user_transaction(rt.sessionmaker, user_id)
            if user_id is not None
            else admin_transaction(rt.sessionmaker, "keys list")
        )
        async with scoped as session:
            return [KeyRow.from_model(k) for k in await ApiKeyService(session).list(user_id)]

    return run(work, quiet=True)


def _revoke_in_database(key_id: uuid.UUID) -> KeyRow:
    from app.cli.common import Runtime, run
    from app.errors import ServiceError
    from app.runtime import admin_transaction
    from app.services.api_keys import ApiKeyService

    async def work(rt: Runtime) -> KeyRow:
        async with admin_transaction(rt.sessionmaker, "keys revoke") as session:
            return KeyRow.from_model(await ApiKeyService(session).revoke(key_id))

    try:
        return run(work, quiet=True)
    except ServiceError as exc:
        raise fail(exc.message) from None
