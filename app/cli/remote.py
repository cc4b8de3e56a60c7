"""The running service's admin API, which `pgrecall keys` and `pgrecall spaces` ask first.

A running service answers through its admin API (/v1/admin/...): a fraction of a second, where
starting the embedded database for one row takes seconds. When nothing answers at the service's
address (PGRECALL_HOST/PGRECALL_PORT, or --server) within a short connect timeout, or it refuses
the admin key, the command works on the database itself (`local_database` says which) through
the shared runner in app/cli/common.py.

Only the standard library, typer and app.cli.common are imported here: the commands that use
this module start without the database stack (app/cli/__init__.py runs their groups alone).
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import typer

from app.cli.common import fail, settings_or_exit

if TYPE_CHECKING:
    from app.config import Settings

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
        """The JSON answer of a 2xx (None when it has no body); Unreachable when nothing
        answers; exit 1 on an error."""
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
        if 200 <= response.status < 300 and (answer is not None or not raw):
            return answer  # None: an answer without a body (204)
        detail = answer.get("detail") if isinstance(answer, dict) else None
        raise fail(f"{self.base}: {response.status} {detail or raw[:200].decode(errors='replace')}")


def local_database(remote: Server) -> None:
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


def server_for(override: str | None) -> Server:
    """The service to ask first; logging stays at WARNING so success prints only the result."""
    return Server.from_settings(settings_or_exit(quiet=True), override)


def parse_time(value: str | datetime | None) -> datetime | None:
    """A timestamp as both paths give it: the admin API's ISO text or the ORM row's datetime."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def shown_time(value: datetime | None) -> str:
    """A timestamp as the commands print it (minutes; "-" for none)."""
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M}"
