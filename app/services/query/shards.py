"""Reads on the shard's worker (Citus): the query path's read transactions go straight to the
worker that holds the user's shard group and read its shards by name, instead of through the
coordinator (docs/scaling.md, "Reads on the shard's worker").

Through the coordinator each statement is planned twice, as a distributed query there and
again on the worker, which also gets every statement as new text (no plan it keeps), plus a
hop each way. On the worker, on the shards themselves, a statement is an ordinary Postgres
statement: planned once, with the plans the single node keeps. What makes it as safe:

- the shards carry their table's row-level security, forced, with the same policies
  (`pgrecall db distribute` writes them; `pgrecall doctor` compares them), and the transaction
  is scoped and signed exactly as through the coordinator: the worker holds the scope key;
- the route says which shard ids to read, and the message that begins each transaction checks
  on the worker that the user's shard group is still placed there (after a shard move it is
  not, the check fails, and the read goes through the coordinator: a moved shard's old copy,
  kept a while for deferred cleanup, is never read);
- a statement the rename does not cover reads the distributed table on the worker, which Citus
  (its metadata is on every node) routes as the coordinator would: slower, never wrong.

Writes, shared spaces' reads and everything outside the query path go through the coordinator.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import ShardRoute, create_engine, engine_scope_key, one_line
from app.repositories.shards import Placement, ShardRepository, placement_check
from app.roles import DISTRIBUTED_TABLES

log = logging.getLogger(__name__)

# The words that may follow a table in FROM or JOIN and are not its alias.
_NOT_ALIAS = (
    "WHERE|ORDER|GROUP|LIMIT|OFFSET|FETCH|UNION|EXCEPT|INTERSECT|JOIN|ON|USING|CROSS|LEFT|"
    "RIGHT|INNER|FULL|NATURAL|LATERAL|WINDOW|HAVING|FOR|TABLESAMPLE|RETURNING"
)
# A table read in FROM or JOIN, by its bare name (not a shard's: `_` is part of a word), and
# whether an alias follows it (`AS x`, or a bare `x`).
_TABLE = re.compile(
    r"\b(FROM|JOIN)(\s+)("
    + "|".join(sorted(DISTRIBUTED_TABLES, key=len, reverse=True))
    + rf")\b(?=(\s+AS\b|\s+(?!(?:{_NOT_ALIAS})\b)[A-Za-z_]\w*)?)",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=4096)
def renamed(sql: str, shards: tuple[tuple[str, int], ...]) -> str:
    """`sql` reading each table of `shards` as its shard: `FROM messages AS m` as `FROM
    messages_102050 AS m`, and `FROM messages` as `FROM messages_102050 AS messages`, so the
    statement's `messages.id` still means the same column."""
    ids = dict(shards)

    def shard(match: re.Match[str]) -> str:
        keyword, space, table, aliased = match.groups()
        if table not in ids:
            return match.group(0)
        alias = "" if aliased else f" AS {table}"
        return f"{keyword}{space}{table}_{ids[table]}{alias}"

    return _TABLE.sub(shard, sql)


@dataclass
class _Known:
    placement: Placement | None
    at: float


@dataclass
class ShardRouter:
    """Each user's ShardRoute on a Citus coordinator (`route`), looked up on the coordinator
    and kept `ttl_s` seconds; None where the database is not a Citus cluster, for a user whose
    shards are not all on one worker, or while a lookup fails (reads then go through
    `engine` as before). One pool per worker, opened on first use."""

    engine: AsyncEngine  # the coordinator, as the service role
    pool_size: int = 10
    statement_timeout_ms: int = 5000
    ttl_s: float = 30.0
    max_users: int = 10_000
    clock: Callable[[], float] = time.monotonic
    # Whether the database has Citus' catalog (None: not asked yet; asked once).
    _citus: bool | None = field(default=None, init=False)
    _known: OrderedDict[str, _Known] = field(default_factory=OrderedDict, init=False)
    _workers: dict[tuple[str, int], AsyncEngine] = field(default_factory=dict, init=False)
    # Workers a read failed on, and when: their users read through the coordinator for
    # `ttl_s` (a worker the service cannot reach costs one failed attempt per ttl, not one
    # per query).
    _down: dict[tuple[str, int], float] = field(default_factory=dict, init=False)

    async def route(self, user_id: str) -> ShardRoute | None:
        if self._citus is False:
            return None
        now = self.clock()
        known = self._known.get(user_id)
        if known is None or now - known.at > self.ttl_s:
            try:
                placement = await self._lookup(user_id)
            except (SQLAlchemyError, OSError) as error:
                log.warning("shard lookup failed, reading through the coordinator: %s",
                            one_line(error))  # fmt: skip
                return None
            if self._citus is False:
                return None
            known = self._known[user_id] = _Known(placement, now)
            while len(self._known) > self.max_users:
                self._known.popitem(last=False)
        self._known.move_to_end(user_id)
        placement = known.placement
        if placement is None:
            return None
        down = self._down.get((placement.host, placement.port))
        if down is not None:
            if now - down <= self.ttl_s:
                return None
            del self._down[(placement.host, placement.port)]
        return self._route(user_id, placement)

    async def _lookup(self, user_id: str) -> Placement | None:
        async with self.engine.connect() as connection:
            repo = ShardRepository(connection)
            if self._citus is None:
                self._citus = await repo.citus()
                if not self._citus:
                    return None
            placement = await repo.placement(user_id, DISTRIBUTED_TABLES)
            await connection.rollback()
        return placement

    def _route(self, user_id: str, placement: Placement) -> ShardRoute:
        shards = tuple(sorted(placement.shards.items()))
        node = (placement.host, placement.port)

        def failed(error: BaseException) -> None:
            self._known.pop(user_id, None)  # looked up again at its next query
            if node not in self._down:
                log.warning("read on the shard's worker %s:%d failed; its users read through "
                            "the coordinator for %.0f s: %s", *node, self.ttl_s,
                            one_line(error))  # fmt: skip
            self._down[node] = self.clock()

        return ShardRoute(
            engine=self._worker(placement.host, placement.port),
            rename=functools.partial(renamed, shards=shards),
            check=placement_check(placement.shards[DISTRIBUTED_TABLES[0]]),
            failed=failed,
        )

    def _worker(self, host: str, port: int) -> AsyncEngine:
        engine = self._workers.get((host, port))
        if engine is None:
            url = self.engine.url.set(host=host, port=port)
            engine = create_engine(
                url.render_as_string(hide_password=False),
                pool_size=self.pool_size,
                statement_timeout_ms=self.statement_timeout_ms,
                scope_key=engine_scope_key(self.engine),
                # A worker's database is not the coordinator's, whose setting `pgrecall db
                # distribute` makes: without it every new connection's type lookup (asyncpg's,
                # once per connection) took over a second there, as on the coordinator.
                server_settings={"citus.override_table_visibility": "off"},
            )
            self._workers[(host, port)] = engine
        return engine

    async def close(self) -> None:
        """Closes the workers' pools (the coordinator's engine is the caller's)."""
        engines, self._workers = list(self._workers.values()), {}
        for engine in engines:
            await engine.dispose()
