"""LangGraph `BaseStore` backed by pgrecall's HTTP API (`pip install pgrecall[langgraph]`).

    from pgrecall.langgraph_store import PgrecallStore
    store = PgrecallStore("http://127.0.0.1:8000", api_key="pgr_...")   # a per-user key
    store.put(("memories", "preference"), "editor", {"content": "Prefers Helix"})
    graph = builder.compile(store=store)

The user is the credential's (a per-user key, or `user_id` with the service key): namespaces
never name a user, and nothing in one user's store is visible to another. Every item is a
memory of that user (`/v1/store`, app/services/store.py): query_memory and the chat proxy find
it, its type is the namespace's last label when that is a memory type (fact, preference,
decision, note) and `note` otherwise, and its searchable text is the value's `content` or
`text` field (else the value as JSON). Search ranks by meaning when a query is given, with the
service's own embedder (an `index` configuration is kept as `index_config` for code that reads
it, but embeds nothing here), else newest first; filters are exact matches on top-level fields
(`$eq` too; other operators are refused). TTLs are supported: `put(..., ttl=minutes)`, reads
with `refresh_ttl`, and `sweep_ttl()` / `start_ttl_sweeper()` with a `ttl` configuration.

Scopes (docs/agents.md, "Scopes and shared spaces"): `agent_id` (and `run_id`, `scope_mode`)
make the store one agent's (run's): what it puts is that agent's, and it never sees another
agent's items (the user's unscoped ones too, unless `scope_mode="own"`). A `client` or
`async_client` passed in keeps its own scope (`Client(..., agent_id="planner")`); these
arguments are for the clients the store makes itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from pgrecall import _calls as c
from pgrecall import types as t
from pgrecall._core import Call
from pgrecall.client import AsyncClient, Client

__all__ = ["PgrecallStore"]


def _item(stored: t.StoreItem) -> Item:
    return Item(
        value=stored.value,
        key=stored.key,
        namespace=tuple(stored.namespace),
        created_at=stored.created_at,
        updated_at=stored.updated_at,
    )


def _search_item(stored: t.StoreItem) -> SearchItem:
    return SearchItem(
        namespace=tuple(stored.namespace),
        key=stored.key,
        value=stored.value,
        created_at=stored.created_at,
        updated_at=stored.updated_at,
        score=stored.score,
    )


def _filter(op: SearchOp) -> dict[str, Any] | None:
    """The filter as the service reads it (the same operators as LangGraph's)."""
    return dict(op.filter) if op.filter else None


def _conditions(op: ListNamespacesOp) -> tuple[tuple[str, ...], tuple[str, ...]]:
    prefix: tuple[str, ...] = ()
    suffix: tuple[str, ...] = ()
    for condition in op.match_conditions or ():
        if condition.match_type == "prefix":
            if prefix:
                raise ValueError("at most one prefix condition")
            prefix = tuple(condition.path)
        elif condition.match_type == "suffix":
            if suffix:
                raise ValueError("at most one suffix condition")
            suffix = tuple(condition.path)
        else:
            raise ValueError(f"unknown match type {condition.match_type!r}")
    return prefix, suffix


class PgrecallStore(BaseStore):
    """A LangGraph store whose items are the user's pgrecall memories."""

    supports_ttl = True

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        user_id: str | None = None,
        api_key: str | None = None,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        ttl: TTLConfig | None = None,
        index: IndexConfig | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        scope_mode: str | None = None,
    ) -> None:
        """`agent_id`, `run_id`, `scope_mode`: the scope of the clients made here (a client
        passed in keeps its own)."""
        scope = {"agent_id": agent_id, "run_id": run_id, "scope_mode": scope_mode}
        self._client = client or Client(base_url, user_id=user_id, api_key=api_key, **scope)
        self._async = async_client or AsyncClient(
            base_url, user_id=user_id, api_key=api_key, **scope
        )
        self._owns = (client is None, async_client is None)
        self.ttl_config = ttl
        # LangGraph's stores name their index here; pgrecall's service embeds every item itself.
        self.index_config = index
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    def sweep_ttl(self) -> int:
        """Delete the user's expired items now; how many (reads skip them already)."""
        return self._client._run(c.store_sweep())

    async def asweep_ttl(self) -> int:
        return await self._async._run(c.store_sweep())

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> threading.Thread:
        """Sweep every `sweep_interval_minutes` (default: the TTL config's) in a daemon thread
        until `stop_ttl_sweeper()` or `close()`."""
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
        if not minutes:
            raise ValueError("no sweep interval: pass one or set ttl['sweep_interval_minutes']")
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper
        self._stop.clear()

        def sweep() -> None:
            while not self._stop.wait(float(minutes) * 60):
                try:
                    self.sweep_ttl()
                except Exception:
                    continue

        self._sweeper = threading.Thread(target=sweep, name="pgrecall-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return self._sweeper

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; whether it has stopped."""
        self._stop.set()
        if self._sweeper is None:
            return True
        self._sweeper.join(timeout)
        return not self._sweeper.is_alive()

    def close(self) -> None:
        self.stop_ttl_sweeper()
        if self._owns[0]:
            self._client.close()

    async def aclose(self) -> None:
        if self._owns[1]:
            await self._async.aclose()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order, one HTTP call each."""
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """As `batch`, on the async client."""
        return [await self._arun(op) for op in ops]

    def _run(self, op: Op) -> Result:
        call, finish = _plan(op)
        return finish(self._client._run(call))

    async def _arun(self, op: Op) -> Result:
        call, finish = _plan(op)
        return finish(await self._async._run(call))


def _plan(op: Op) -> tuple[Call[Any], Callable[[Any], Result]]:
    """The one HTTP call an operation is, and how its answer becomes the store's result (the
    same for the sync and the async client)."""
    validate_op_namespace(op)
    if isinstance(op, GetOp):
        get = c.store_get(op.namespace, op.key, refresh_ttl=bool(op.refresh_ttl))
        return get, lambda found: _item(found) if found is not None else None
    if isinstance(op, PutOp):
        if op.value is None:
            return c.store_delete(op.namespace, op.key), lambda _: None
        # `index` is False (not searched by meaning) or None/fields: the service embeds the
        # item's text (its `content` or `text` field, else the value), not chosen fields.
        put = c.store_put(op.namespace, op.key, op.value, index=op.index is not False, ttl=op.ttl)
        return put, lambda _: None
    if isinstance(op, SearchOp):
        search = c.store_search(
            op.namespace_prefix,
            op.query,
            _filter(op),
            op.limit,
            op.offset,
            refresh_ttl=bool(op.refresh_ttl),
        )
        return search, lambda hits: [_search_item(h) for h in hits]
    if isinstance(op, ListNamespacesOp):
        prefix, suffix = _conditions(op)
        listing = c.store_namespaces(prefix, suffix, op.max_depth, op.limit, op.offset)
        return listing, lambda namespaces: namespaces
    raise ValueError(f"unknown operation {type(op).__name__}")
