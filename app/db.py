"""Engine and session factories, and whose rows a session may see.

Row-level security (migrations 0003_rls, 0018_admin_role) shows the service role only the rows
of the user named in the transaction's `pgrecall.user_id` setting, and only when
`pgrecall.user_sig` signs it with the database's scope key (ScopeKey; the service role cannot
read the key, so it cannot name another user). Every row is visible to the admin role
(`pgrecall_admin`) alone. Sessions made with `user_session` set the signed user at the start of
every transaction they run, with SET LOCAL (migration 0010's pgrecall_set_local, one statement,
also forwarded to the workers of a Citus cluster), so commit or rollback (also after an error)
clears it and a pooled connection never carries one user into the next transaction. Sessions
made with `admin_sessions` run on the admin engine (create_sessionmaker's `admin_engine`),
audit-logged. A session made without a scope sees no rows as the service role (it still works
as the owner, for maintenance and tests). The query path's transactions (`read_transaction`)
run on asyncpg itself with the same scope, set in the message that begins them.

Vectors travel in pgvector's text form (app/vectors.py): the ORM's HalfVec type renders them,
and raw SQL casts a `vector_literal()` string to halfvec. (pgvector's binary asyncpg codec
would clash with the ORM type.)"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy import event, exc, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session, SessionTransaction

from app.domain import MemoryScope, as_scope

audit = logging.getLogger("app.audit")

_SCOPE = "pgrecall.scope"
# The read path's transactions also plan every statement for its own parameters (one round trip):
# a cached generic plan sizes `user_id = $1` by the average user, and for a big user it walked
# all of the user's rows per candidate (the content fetch: 27 ms instead of 1; neighbours 12 ms
# instead of 0.7; docs/performance.md, "Where the service's time went").
# And without parallel workers: Postgres planned a small user's exact vector statement (a few
# hundred turns and their passages) with two workers whose start cost more than the statement's
# work, and on a query path that already runs two connections per query, workers only compete
# for the same cores (docs/performance.md, "The read path without parallel workers").
READ_PATH_SETTINGS = {
    "plan_cache_mode": "force_custom_plan",
    "max_parallel_workers_per_gather": "0",
}
# Every setting of a transaction's scope is a SET LOCAL, all in one statement (one round trip):
# migration 0010_distributable's pgrecall_set_local. On a Citus coordinator SET LOCAL reaches the
# worker connections (set_config() does not: row-level security then saw no user there, so
# writes failed and reads came back empty; docs/scaling.md).
# Where Citus is loaded the transaction also plans every statement for its values, before the
# scope's own settings (which may override it): a generic plan does not know its `user_id`, and
# the coordinator then runs a statement its fast-path router does not take (a join, a subquery,
# a CTE) on every shard or refuses it ("could not create distributed plan"), whatever
# plan_cache_mode the role or session runs with (docs/scaling.md, "Routing").
SET_LOCAL = text(
    "SELECT pgrecall_set_local(c.names || CAST(:names AS text[]), c.vals || CAST(:vals AS text[])) "
    "FROM (SELECT CASE WHEN current_setting('citus.propagate_set_commands', true) IS NULL "
    "THEN CAST(ARRAY[] AS text[]) ELSE ARRAY['plan_cache_mode'] END AS names, "
    "CASE WHEN current_setting('citus.propagate_set_commands', true) IS NULL "
    "THEN CAST(ARRAY[] AS text[]) ELSE ARRAY['force_custom_plan'] END AS vals) AS c"
)


def set_local_params(settings: dict[str, str]) -> dict[str, list[str]]:
    """SET_LOCAL's parameters for these settings."""
    return {"names": list(settings), "vals": list(settings.values())}


# SHA-256's block: HMAC pads its key to it.
_BLOCK = 64
# Where an engine keeps the scope key its user scopes are signed with (an execution option:
# every connection of the engine carries it).
_SCOPE_KEY = "pgrecall_scope_key"
_ADMIN_BIND = "pgrecall.admin_bind"


def scope_key_pads(key: bytes) -> tuple[bytes, bytes]:
    """HMAC-SHA256's inner and outer pads of `key` (migration 0018 stores these, so SQL can
    compute the HMAC with sha256() alone)."""
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


@dataclass(frozen=True)
class ScopeKey:
    """The database's key for signing user scopes (table pgrecall_scope_key, migration 0018):
    `pgrecall_scope_user()` accepts `pgrecall.user_id` only with `pgrecall.user_sig` =
    HMAC-SHA256(key, user id), hex. Read at start-up as the admin role (app.roles)."""

    inner_pad: bytes
    outer_pad: bytes

    def sign(self, message: str) -> str:
        """HMAC-SHA256 of `message` (a user id, or MemoryScope.signed_message()), hex."""
        inner = hashlib.sha256(self.inner_pad + message.encode()).digest()
        return hashlib.sha256(self.outer_pad + inner).hexdigest()

    def __repr__(self) -> str:  # never the key in a log line or a traceback
        return "ScopeKey(...)"


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    statement_timeout_ms: int = 5000,
    scope_key: ScopeKey | None = None,
    server_settings: Mapping[str, str] | None = None,
) -> AsyncEngine:
    """An asyncpg engine with a server-side statement timeout. `scope_key`: the key its user
    scopes are signed with (the service role's engine needs it: without it a user-scoped
    transaction sees no row; a superuser or the admin role sees every row either way).
    `server_settings`: more settings every connection starts with."""
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,  # queries may hold two connections each: see Resources.query_slots
        # No pre-ping: with asyncpg it is three round trips (BEGIN, ';', ROLLBACK) on every
        # checkout, and a query checks out two connections. _drop_closed_connection below finds
        # the connections a restarted or stopped server closed without any round trip.
        pool_pre_ping=False,
        pool_timeout=5,
        connect_args={
            "timeout": 5,
            "command_timeout": max(1, statement_timeout_ms // 1000 + 5),
            "server_settings": {
                "statement_timeout": str(statement_timeout_ms),
                "application_name": "pgrecall",
                **(server_settings or {}),
            },
        },
    )
    event.listen(engine.sync_engine.pool, "checkout", _drop_closed_connection)
    return engine if scope_key is None else with_scope_key(engine, scope_key)


def with_scope_key(engine: AsyncEngine, key: ScopeKey) -> AsyncEngine:
    """`engine`, now signing the user scopes of its transactions with `key`."""
    engine.sync_engine.update_execution_options(**{_SCOPE_KEY: key})
    return engine


def engine_scope_key(engine: AsyncEngine | Engine | Connection) -> ScopeKey | None:
    """The scope key an engine (or a connection of it) signs user scopes with."""
    options = engine.get_execution_options()
    key = options.get(_SCOPE_KEY)
    return key if isinstance(key, ScopeKey) else None


def _drop_closed_connection(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """A pooled connection the server has closed (restart, shutdown, terminated backend) is
    replaced before use: asyncpg marks it closed as soon as the event loop reads the server's
    goodbye, so this costs no round trip. (A statement on a connection that died unseen fails
    once; SQLAlchemy then invalidates the pool's connections.)"""
    if dbapi_connection.driver_connection.is_closed():
        raise exc.DisconnectionError("connection closed by the server")


def create_sessionmaker(
    engine: AsyncEngine, admin_engine: AsyncEngine | None = None
) -> async_sessionmaker[AsyncSession]:
    """Sessions that keep loaded attributes after commit (responses are built after it).

    `admin_engine` (logged in as the admin role): where `admin_sessions` and
    `job_queue_sessions` of this sessionmaker run; without one they run on `engine` (the
    owner's or a superuser's engine: scripts, tests)."""
    info = {} if admin_engine is None else {_ADMIN_BIND: admin_engine}
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False, info=info)


@dataclass(frozen=True)
class UserScope:
    """Transactions see and write only this user's rows, within `memory`'s agent and run
    (migration 0019: the scope policy; rows are stamped with them)."""

    memory: MemoryScope
    custom_plans: bool = False  # the read path: custom plans, no parallel workers (see above)
    # More settings of the read path's transactions, made in the same statement as the user
    # (the vector statement's planner settings, a small user's generic plans).
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def user_id(self) -> str:
        return self.memory.user_id


@dataclass(frozen=True)
class AdminScope:
    """Transactions run as the admin role, which sees every user's rows; `reason` goes to the
    audit log."""

    reason: str


@dataclass(frozen=True)
class KeyLookupScope:
    """Transactions see only the API key row with this token hash (authentication, which runs
    before the user is known)."""

    key_hash: str


@dataclass(frozen=True)
class JobQueueScope:
    """The extraction workers' claims across users: on the admin engine, as AdminScope, without
    an audit line per poll (migration 0018 retired the service role's job-queue policy)."""


def job_queue_sessions(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> async_sessionmaker[AsyncSession]:
    """A sessionmaker for claiming extraction jobs across users (on the admin engine)."""
    return _scoped(sessionmaker, JobQueueScope())


def key_lookup_session(
    sessionmaker: async_sessionmaker[AsyncSession], key_hash: str
) -> AsyncSession:
    """A session that can read (and mark used) one API key row, found by its token hash."""
    if not key_hash:
        raise ValueError("a key lookup needs a hash")
    return sessionmaker(info={_SCOPE: KeyLookupScope(key_hash)})


# Where a session keeps the work to run once its transaction commits (app/runtime/uow.py).
AFTER_COMMIT = "after_commit"
AfterCommit = Callable[[], Awaitable[None]]


def after_commit(session: AsyncSession, hook: AfterCommit) -> None:
    """Run `hook` once the session's transaction has committed (cache updates, never data).

    Services call this for their own side effects; the unit of work (app.runtime.uow) runs the
    hooks after its commit, and drops them on a rollback."""
    session.info.setdefault(AFTER_COMMIT, []).append(hook)


def user_session(
    sessionmaker: async_sessionmaker[AsyncSession],
    user: str | MemoryScope,
    *,
    custom_plans: bool = False,
    settings: Mapping[str, str] | None = None,
) -> AsyncSession:
    """A session whose every transaction runs as `user_id` under row-level security.

    custom_plans (the read path): its transactions also plan every statement for the values it
    runs with (`plan_cache_mode = force_custom_plan`) and without parallel workers
    (`max_parallel_workers_per_gather = 0`), set in the same statement as the user.
    settings (with custom_plans): more SET LOCALs of that statement, overriding those (one
    round trip for all of them; RetrievalRepository.search_size says when a small user's
    statements run on generic plans)."""
    memory = as_scope(user)
    if not memory.user_id:
        raise ValueError("a user-scoped session needs a user id")
    scope = (
        read_path_scope(memory, settings)
        if custom_plans
        else UserScope(memory)
    )
    return sessionmaker(info={_SCOPE: scope})


def read_path_scope(
    user: str | MemoryScope, settings: Mapping[str, str] | None = None
) -> UserScope:
    """The scope of the query path's transactions: the user (and agent, run), custom plans, no
    parallel workers, and these settings over them (user_session, read_transaction)."""
    memory = as_scope(user)
    return UserScope(memory, True, tuple(sorted((settings or {}).items())))


def admin_sessions(
    sessionmaker: async_sessionmaker[AsyncSession], reason: str
) -> async_sessionmaker[AsyncSession]:
    """A sessionmaker on the admin engine (every user's rows), for work that spans users:
    re-embedding, index rebuilds, seeding, the admin API. Each transaction is audit-logged."""
    return _scoped(sessionmaker, AdminScope(reason))


def _scoped(
    sessionmaker: async_sessionmaker[AsyncSession], scope: AdminScope | JobQueueScope
) -> async_sessionmaker[AsyncSession]:
    kw = dict(sessionmaker.kw)
    info = kw.get("info", {})
    kw["info"] = {**info, _SCOPE: scope}
    if info.get(_ADMIN_BIND) is not None:
        kw["bind"] = info[_ADMIN_BIND]
    return async_sessionmaker(class_=sessionmaker.class_, **kw)


def session_scope(
    session: Session | AsyncSession,
) -> UserScope | AdminScope | KeyLookupScope | JobQueueScope | None:
    """The scope a session was made with (None: unscoped)."""
    scope = session.info.get(_SCOPE)
    kinds = UserScope | AdminScope | KeyLookupScope | JobQueueScope
    return scope if isinstance(scope, kinds) else None


def scope_settings(
    scope: UserScope | AdminScope | KeyLookupScope | JobQueueScope, key: ScopeKey | None = None
) -> dict[str, str]:
    """The transaction-local settings a scope runs with (row-level security reads them); a user
    scope is signed with `key` (none: unsigned, which the service role sees no row with). The
    admin scopes need none: their rights are the admin role's."""
    if isinstance(scope, UserScope):
        extra = {**READ_PATH_SETTINGS, **dict(scope.settings)} if scope.custom_plans else {}
        memory = scope.memory
        signed = {} if key is None else {"pgrecall.user_sig": key.sign(memory.signed_message())}
        # Always all three, so a setting left on the connection by anything else counts for
        # nothing: the signature covers what is set here.
        scoped = {
            "pgrecall.agent_id": memory.agent_id or "",
            "pgrecall.run_id": memory.run_id or "",
            "pgrecall.scope_own": "on" if memory.own else "",
        }
        return {"pgrecall.user_id": scope.user_id, **signed, **scoped, **extra}
    if isinstance(scope, KeyLookupScope):
        return {"pgrecall.key_hash": scope.key_hash}
    return {}


@event.listens_for(Session, "after_begin")
def _apply_scope(session: Session, _tx: SessionTransaction, connection: Connection) -> None:
    """First statement of every transaction of a scoped session (any engine, any sessionmaker)."""
    scope = session_scope(session)
    if scope is None:
        return
    if isinstance(scope, AdminScope):
        audit.info(
            "admin mode: all users' rows visible",
            extra={"fields": {"reason": scope.reason}},
        )
    settings = scope_settings(scope, engine_scope_key(connection))
    if settings:
        connection.execute(SET_LOCAL, set_local_params(settings))


# -- the query path's read transaction ---------------------------------------------------------

# A bind parameter of SQLAlchemy's text(): the pattern of its TextClause, so a statement reads
# the same through text() and through asyncpg (`::type` casts are not binds).
_BIND = re.compile(r"(?<![:\w\\]):(\w+)(?![:\w])")


@functools.lru_cache(maxsize=256)
def positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` with its `:name` binds numbered as asyncpg's `$n`, and the names in that order."""
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return _BIND.sub(number, sql), tuple(names)


_DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError)


@dataclass(frozen=True)
class ShardRoute:
    """Where a user's rows live on a Citus cluster, for reading them there directly
    (app/services/query/shards.py makes it; docs/scaling.md, "Reads on the shard's worker").

    `engine`: the worker that holds the user's shard group, as the same role and scope key as
    the coordinator's engine. `rename`: a statement's distributed tables as the user's shards
    there (`messages` -> `messages_102050`). `check`: a statement that fails unless that shard
    group is still placed on this worker (it runs in the message that begins the transaction,
    so a rebalanced shard is never read where it was). `failed`: called with the error when the
    worker cannot begin the transaction; the read then goes through the coordinator."""

    engine: AsyncEngine
    rename: Callable[[str], str]
    check: str
    failed: Callable[[BaseException], None]


class ReadTransaction:
    """One transaction of the query path, run by asyncpg on a connection of the engine's pool.

    The read path's statements return tens of rows each, and its transaction is BEGIN, the
    scope's settings, three statements and COMMIT: through an ORM session the transaction's
    own Python cost about 0.6 ms more per query than through the driver (docs/performance.md,
    "The read transaction through the driver"). Same scope as `user_session(..., custom_plans=
    True)`: the first statement after BEGIN is the scope's SET LOCAL (`scope_settings`), so row-
    level security sees the user and COMMIT or ROLLBACK clears it. A driver error is raised as
    SQLAlchemy's DBAPIError, as from a session (the callers' failure handling is the same).
    Statements take `:name` binds, as text() does (`positional`)."""

    def __init__(
        self, driver: asyncpg.Connection, rename: Callable[[str], str] | None = None
    ) -> None:
        self.driver = driver
        # On a shard's worker (ShardRoute): the statements name the user's shards.
        self.rename = rename

    def _statement(self, sql: str) -> tuple[str, tuple[str, ...]]:
        query, names = positional(sql)
        return (query if self.rename is None else self.rename(query)), names

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> Sequence[Any]:
        query, names = self._statement(sql)
        try:
            return await self.driver.fetch(query, *[params[name] for name in names])
        except _DRIVER_ERRORS as error:
            raise exc.DBAPIError(query, None, error) from error

    async def execute(self, sql: str, params: Mapping[str, Any]) -> None:
        query, names = self._statement(sql)
        try:
            await self.driver.execute(query, *[params[name] for name in names])
        except _DRIVER_ERRORS as error:
            raise exc.DBAPIError(query, None, error) from error


def sql_literal(value: str) -> str:
    """`value` as an escape-string literal (E'...'): backslashes and quotes doubled, so it
    reads back exactly whatever `standard_conforming_strings` is. NUL cannot be in a text."""
    if "\x00" in value:
        raise ValueError("a setting cannot hold NUL")
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def begin_scoped(settings: Mapping[str, str]) -> str:
    """BEGIN and the scope's SET LOCALs as one simple-query message (one round trip instead
    of two): the values are literals here, as `pgrecall_set_local` makes them literals too."""
    names = ", ".join(sql_literal(name) for name in settings)
    values = ", ".join(sql_literal(value) for value in settings.values())
    return (
        "BEGIN; SELECT pgrecall_set_local("
        f"CAST(ARRAY[{names}] AS text[]), CAST(ARRAY[{values}] AS text[]))"
    )


@contextlib.asynccontextmanager
async def read_transaction(
    engine: AsyncEngine,
    user: str | MemoryScope,
    settings: Mapping[str, str] | None = None,
    route: ShardRoute | None = None,
) -> AsyncIterator[ReadTransaction]:
    """A ReadTransaction as `user_id` (see there), committed at the end. On an error it is
    rolled back before the connection goes back to the pool; a connection whose statement was
    cancelled (a query's time limit) or that cannot roll back is closed instead (the pool
    opens another). BEGIN and COMMIT are sent as plain statements, not through asyncpg's
    Transaction: a connection the pool gets back carries no transaction state of ours.

    `route` (Citus): the transaction runs on the worker that holds the user's shards, on the
    shards by name; if that worker cannot begin it (down, refusing, the shard moved), on
    `engine` as without a route."""
    scope = read_path_scope(user, settings)
    if not scope.user_id:
        raise ValueError("a user-scoped transaction needs a user id")
    begin = begin_scoped(scope_settings(scope, engine_scope_key(engine)))
    if route is not None:
        direct = await _begun_on_shard(route, begin)
        if direct is not None:
            try:
                async with _committed(direct, None, route.rename) as reads:
                    yield reads
            except (exc.DBAPIError, OSError) as error:  # driver errors come as DBAPIError
                route.failed(error)  # the next read of this user looks its shards up again
                raise
            finally:
                await direct.close()
            return
    async with engine.connect() as connection, _committed(connection, begin) as reads:
        yield reads


async def _begun_on_shard(route: ShardRoute, begin: str) -> AsyncConnection | None:
    """A connection of the route's worker with the transaction begun and its shard checked;
    None (route.failed told why) when the worker cannot."""
    connection: AsyncConnection | None = None
    try:
        connection = await route.engine.connect()
        await (await _driver(connection)).execute(f"{begin}; {route.check}")
        return connection
    except BaseException as error:
        # Not back to the pool in an unknown state, also when cancelled (the query's deadline).
        if connection is not None:
            await connection.invalidate()
            await connection.close()
        if isinstance(error, (*_DRIVER_ERRORS, exc.SQLAlchemyError, OSError, TimeoutError)):
            route.failed(error)
            return None
        raise


@contextlib.asynccontextmanager
async def _committed(
    connection: AsyncConnection, begin: str | None, rename: Callable[[str], str] | None = None
) -> AsyncIterator[ReadTransaction]:
    """Begins (unless begun) and commits read_transaction's transaction on `connection`."""
    driver = await _driver(connection)
    try:
        try:
            if begin is not None:
                await driver.execute(begin)
            yield ReadTransaction(driver, rename)
            await driver.execute("COMMIT")
        except _DRIVER_ERRORS as error:
            raise exc.DBAPIError("read transaction", None, error) from error
    except BaseException as error:
        cancelled = isinstance(error, asyncio.CancelledError)
        if cancelled or not await _rolled_back(driver):
            # Cancelled mid-statement (it may still run on the server), or a connection
            # that cannot roll back: it goes, not back to the pool.
            await connection.invalidate()
        raise


async def _driver(connection: AsyncConnection) -> asyncpg.Connection:
    """The asyncpg connection under a pooled SQLAlchemy connection."""
    driver = (await connection.get_raw_connection()).driver_connection
    assert driver is not None
    return driver


async def _rolled_back(driver: asyncpg.Connection) -> bool:
    """Whether the connection is outside any transaction now (rolled back if it was in one)."""
    if driver.is_closed():
        return False
    if not driver.is_in_transaction():
        return True
    try:
        await asyncio.wait_for(driver.execute("ROLLBACK"), timeout=5)
    except (*_DRIVER_ERRORS, OSError, TimeoutError):
        return False
    return not driver.is_in_transaction()


def one_line(error: BaseException) -> str:
    """An exception as one readable line: the driver's own message, not SQLAlchemy's wrapper."""
    cause = error.orig if isinstance(error, exc.DBAPIError) and error.orig is not None else error
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    head = lines[0] if lines else type(cause).__name__
    # A failed pg_ctl puts the server log below its own output: its FATAL line is the cause.
    telling = [ln for ln in lines[1:] if "FATAL" in ln or "Permission denied" in ln]
    if telling:
        head = f"{head}; {telling[0]}"
    return head if head.startswith(type(cause).__name__) else f"{type(cause).__name__}: {head}"
