"""Every SQL statement app/repositories sends is pinned to one user (isolation + Citus routing).

The driver below calls every public method of every repository class (and the branches that
change the SQL: filters, time limits, exact vs ANN, PRF) against the real test Postgres, inside
one transaction that is rolled back. The statements are captured as Postgres receives them
(SQLAlchemy's before_cursor_execute, a recording wrapper around the raw asyncpg connection
the bulk loader uses, and one around SessionBound._rows, the query path's reads through asyncpg)
and parsed with Postgres' own parser (tests/sql_scope.py). A statement
fails when a user-data table in it lacks a `user_id = <value>` predicate, unless its method is
on the reviewed ALLOWED list below with the reason it may span users.

A repository method the driver does not call fails the test too, so a new method cannot slip
past: add a call to DRIVER (and, only if it must span users, an ALLOWED entry with a reason).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import inspect
import pkgutil
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

import app.repositories
from app.adapters.embedder import LOCAL_DIMENSION, LOCAL_MODEL_ID
from app.db import create_sessionmaker, positional
from app.domain import space_owner
from app.embedded import EmbeddedPostgres
from app.repositories.admin import AdminMemoryRepository, MemoryFilter
from app.repositories.agent_memory import AgentMemoryRepository
from app.repositories.api_keys import ApiKeyRepository
from app.repositories.bulk import BulkMemory, BulkRepository
from app.repositories.chat_turns import ChatTurnRepository
from app.repositories.conversation import ConversationRepository, NewMessage
from app.repositories.conversation_settings import ConversationSettingsRepository
from app.repositories.extraction import ExtractionRepository, ExtractionStatsRepository
from app.repositories.maintenance import MaintenanceRepository, StaleRow
from app.repositories.memory import MemoryRepository, NewMemory
from app.repositories.passages import NewPassage, PassageRepository
from app.repositories.portable import PortableRepository
from app.repositories.purge import PurgeRepository
from app.repositories.retrieval import (
    RetrievalRepository,
    Source,
    TagFilter,
    TimeFilter,
    vector_search_settings,
)
from app.repositories.retrieval.common import SessionBound
from app.repositories.search_index import Document, SearchIndexRepository
from app.repositories.shards import ShardRepository
from app.repositories.spaces import SpaceRepository
from app.repositories.store import StoreRepository
from app.repositories.usage import UsageRepository
from app.repositories.users import UserDirectoryRepository
from bench.store import database
from tests.sql_scope import copy_violations, violations

# Every module of app/repositories, found on disk (packages too, e.g. retrieval/): a new module
# is covered without an edit here.
MODULES = tuple(
    importlib.import_module(m.name)
    for m in pkgutil.walk_packages(app.repositories.__path__, "app.repositories.")
)

# Methods whose statements may span users, each with the reason it was allowed. Reviewed: keep
# this short, and give every entry a reason a reviewer can check.
_API_KEYS = (
    "api_keys is not a per-user table under Citus: it stays a small table on the coordinator "
    "(docs/scaling.md) because authentication must find a key before it knows the user"
)
_MAINTENANCE = (
    "whole-table maintenance run by the operator's CLI (reindex, re-embed); rewrites each row "
    "in place and never returns one user's rows to another; under Citus it runs per shard"
)
ALLOWED: dict[tuple[str, str], str] = {
    ("ApiKeyRepository", "find_by_hash"): _API_KEYS,
    ("ApiKeyRepository", "list"): _API_KEYS + "; the admin listing of all keys",
    ("ApiKeyRepository", "revoke"): _API_KEYS,
    ("ApiKeyRepository", "touch"): _API_KEYS,
    ("ApiKeyRepository", "insert"): _API_KEYS + " (refresh re-reads the row by id)",
    ("MaintenanceRepository", "embedding_rows"): _MAINTENANCE,
    ("MaintenanceRepository", "rebuild_index"): _MAINTENANCE,
    ("MaintenanceRepository", "users_with_vectors"): _MAINTENANCE + "; counts rows per user",
    ("MaintenanceRepository", "build_user_index"): (
        _MAINTENANCE + "; DDL of a partial index whose predicate is one user's id: it reads no "
        "row for a caller (Citus propagates CREATE INDEX to every shard)"
    ),
    ("MaintenanceRepository", "model_counts"): _MAINTENANCE,
    ("MaintenanceRepository", "models_sampled"): _MAINTENANCE + "; the start-up's model check",
    ("MaintenanceRepository", "stale_batch"): _MAINTENANCE,
    ("MaintenanceRepository", "write_embeddings"): _MAINTENANCE,
    ("BulkRepository", "index_memories"): (
        "bulk loader for benchmarks and imports: one set-based statement over rows of many "
        "users just copied, selected by their ids; user_id comes from each row"
    ),
    ("BulkRepository", "analyze"): "ANALYZE of whole tables after a bulk load",
    ("ExtractionRepository", "claim"): (
        "the extraction worker claims due jobs of any user (admin-mode session); every later "
        "step of a claimed job is scoped to the job's user"
    ),
    ("ExtractionStatsRepository", "summary"): "counters across users for /metrics (admin mode)",
    ("UserDirectoryRepository", "page"): (
        "the console's user directory lists the ids of every user (audited admin mode)"
    ),
    ("UserDirectoryRepository", "counts"): (
        "the console's user directory counts rows per listed user id (admin mode); each count "
        "is pinned to one id of the page"
    ),
}

_current: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("repository_call")


def repository_methods() -> set[tuple[str, str]]:
    """(class, method) of every public coroutine method of a *Repository class."""
    found: set[tuple[str, str]] = set()
    for module in MODULES:
        for cls_name, cls in vars(module).items():
            if not (inspect.isclass(cls) and cls_name.endswith("Repository")):
                continue
            if cls.__module__ != module.__name__:
                continue
            # Methods a repository inherits from parts of its own (RetrievalRepository's arms,
            # app/repositories/retrieval/) are its methods too.
            for part in reversed(cls.__mro__):
                if not part.__module__.startswith("app.repositories."):
                    continue
                for name, member in vars(part).items():
                    if name.startswith("_"):
                        continue
                    if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member):
                        found.add((cls_name, name))
    return found


class Recorder:
    def __init__(self) -> None:
        self.statements: list[tuple[tuple[str, str], str]] = []
        self.copies: list[tuple[tuple[str, str], str, tuple[str, ...]]] = []
        self.called: set[tuple[str, str]] = set()

    def sql(self, statement: str) -> None:
        label = _current.get(None)
        if label is not None:
            self.statements.append((label, statement))

    async def call(self, cls: str, method: str, call: Awaitable[Any]) -> Any:
        """Await a repository call (a coroutine runs only when awaited) under its label."""
        self.called.add((cls, method))
        token = _current.set((cls, method))
        try:
            return await call
        finally:
            _current.reset(token)


class RecordingConnection:
    """The asyncpg calls BulkRepository makes, recorded before they run."""

    def __init__(self, conn: asyncpg.Connection, recorder: Recorder) -> None:
        self._conn = conn
        self._recorder = recorder

    async def execute(self, query: str, *args: Any) -> Any:
        self._recorder.sql(query)
        return await self._conn.execute(query, *args)

    async def copy_records_to_table(self, table: str, *, records: Any, columns: Any) -> Any:
        label = _current.get(None)
        if label is not None:
            self._recorder.copies.append((label, table, tuple(columns)))
        return await self._conn.copy_records_to_table(table, records=records, columns=columns)

    async def set_type_codec(self, *args: Any, **kwargs: Any) -> Any:
        return await self._conn.set_type_codec(*args, **kwargs)


def _vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(LOCAL_DIMENSION).astype(np.float32)
    return v / np.linalg.norm(v)


async def _drain(rows: Any) -> list[Any]:
    return [row async for row in rows]


async def drive_session(session: AsyncSession, rec: Recorder, user: str) -> None:
    """Every session-based repository method, with the arguments that change its SQL."""
    # On Citus this one transaction mixes multi-shard statements (the ALLOWED ones) with writes
    # of spaces and space_members, reference tables with a foreign key, which Citus refuses after
    # a parallel operation ("cannot modify table spaces because there was a parallel operation
    # on a distributed table"); the service's transactions that write them send single-shard
    # statements only. Sequential, the same statements run over one connection per node.
    if await session.scalar(text("SELECT count(*) FROM pg_extension WHERE extname = 'citus'")):
        await session.execute(text("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"))
    now = datetime.now(UTC)
    when = TimeFilter(now - timedelta(days=1), now + timedelta(days=1), now + timedelta(days=1))

    conversations = ConversationRepository(session)
    conv = await rec.call("ConversationRepository", "create", conversations.create(user, "t"))
    msgs = [
        NewMessage(
            uuid.uuid4(),
            "user",
            f"I adopted a dog named Rex {i}",
            _vector(i),
            LOCAL_MODEL_ID,
            uuid.uuid4(),
            now if i == 0 else None,
            {},
        )
        for i in range(3)
    ]
    stored = await rec.call(
        "ConversationRepository",
        "insert_messages",
        conversations.insert_messages(user, conv.id, msgs),
    )
    plain = [
        NewMessage(
            uuid.uuid4(), "assistant", "noted", _vector(9), LOCAL_MODEL_ID, uuid.uuid4(), None, {}
        )
    ]
    await conversations.insert_messages(user, conv.id, plain)
    await rec.call("ConversationRepository", "get", conversations.get(user, conv.id, lock=True))
    await rec.call("ConversationRepository", "list", conversations.list(user, limit=5, offset=0))
    await rec.call("ConversationRepository", "touch", conversations.touch(conv.id, user))
    await rec.call(
        "ConversationRepository", "set_goal", conversations.set_goal(user, conv.id, "a goal")
    )
    await rec.call(
        "ConversationRepository",
        "last_messages",
        conversations.last_messages(user, conv.id, 2),
    )
    await rec.call(
        "ConversationRepository",
        "list_messages",
        conversations.list_messages(user, conv.id, after=0, limit=5),
    )
    await rec.call(
        "ConversationRepository",
        "recent_messages",
        conversations.recent_messages(user, conv.id, 5),
    )
    settings = ConversationSettingsRepository(session)
    await rec.call(
        "ConversationSettingsRepository",
        "update",
        settings.update(user, conv.id, {"extraction": True}),
    )
    await rec.call("ConversationSettingsRepository", "summary", settings.summary(user, conv.id))
    for after in (None, 1):
        await rec.call(
            "ConversationSettingsRepository",
            "messages_after",
            settings.messages_after(user, conv.id, after, 5),
        )
    await rec.call(
        "ConversationSettingsRepository",
        "save_summary",
        settings.save_summary(user, conv.id, "a summary", 2, None),
    )

    memories = MemoryRepository(session)
    new = [
        NewMemory(
            uuid.uuid4(),
            user,
            f"Rex likes the park {i}",
            f"{user}-{i}",
            "fact",
            _vector(20 + i),
            LOCAL_MODEL_ID,
            0.5,
            now if i == 0 else None,
            None,
            "test",
            stored[0].id if i == 1 else None,
            {"via": "rate_message"} if i == 1 else {},
        )
        for i in range(3)
    ]
    ids = await rec.call("MemoryRepository", "insert_many", memories.insert_many(new))
    await rec.call("MemoryRepository", "get", memories.get(user, ids[0]))
    await rec.call("MemoryRepository", "set_deleted", memories.set_deleted(user, ids[2], True))

    usage = UsageRepository(session)
    await rec.call(
        "UsageRepository", "record_retrievals", usage.record_retrievals(user, {ids[0]: 2}, now)
    )
    await rec.call("UsageRepository", "lock_user", usage.lock_user(user))
    await rec.call("UsageRepository", "live_count", usage.live_count(user, now))
    await rec.call("UsageRepository", "evict", usage.evict(user, 1, keep=ids[0], at=now))

    passages = PassageRepository(session)
    await rec.call(
        "PassageRepository",
        "insert",
        passages.insert(user, LOCAL_MODEL_ID, [NewPassage(stored[0].id, 0, _vector(30))]),
    )
    await rec.call(
        "PassageRepository",
        "messages_without",
        passages.messages_without(user, LOCAL_MODEL_ID, after=None, limit=10),
    )
    await rec.call(
        "PassageRepository",
        "messages_without",
        passages.messages_without(user, LOCAL_MODEL_ID, after=stored[0].id, limit=10),
    )
    await rec.call(
        "PassageRepository", "drop_other_models", passages.drop_other_models(user, "another")
    )

    index = SearchIndexRepository(session)
    docs = [Document(i, Source.MEMORY, "Rex likes the park") for i in ids]
    docs += [Document(m.id, Source.MESSAGE, m.content, "before", "after") for m in stored]
    await rec.call("SearchIndexRepository", "index", index.index(user, docs))
    await rec.call("SearchIndexRepository", "reindex", index.reindex(user, docs[:1]))
    await rec.call("SearchIndexRepository", "unindex", index.unindex(user, [ids[2]]))
    await rec.call("SearchIndexRepository", "sources", index.sources(user))

    retrieval = RetrievalRepository(session)
    # The second round adds every filter: types, a time window and tags (all, then any).
    for types, time, tags in (
        (None, TimeFilter(), None),
        (["fact"], when, TagFilter(["work"], all_=True)),
        (None, TimeFilter(), TagFilter(["work", "home"])),
    ):
        for memories_on, messages_on in ((True, True), (True, False), (False, True)):
            await rec.call(
                "RetrievalRepository",
                "keyword",
                retrieval.keyword(
                    user,
                    "Where does Rex like to go?",
                    limit=10,
                    memories=memories_on,
                    messages=messages_on,
                    types=types,
                    k1=1.2,
                    b=0.75,
                    when=time,
                    tags=tags,
                ),
            )
            await rec.call(
                "RetrievalRepository",
                "expansion",
                retrieval.expansion(
                    user,
                    "Rex",
                    [ids[0], stored[0].id],
                    terms=3,
                    min_df=1,
                    limit=10,
                    memories=memories_on,
                    messages=messages_on,
                    types=types,
                    k1=1.2,
                    b=0.75,
                    when=time,
                    tags=tags,
                ),
            )
        for exact, weight in ((True, 0.0), (False, 0.0), (True, 0.7), (False, 0.7)):
            await rec.call(
                "RetrievalRepository",
                "set_vector_search",
                retrieval.set_vector_search(
                    vector_search_settings(exact=exact, probes=10, max_probes=100)
                ),
            )
            await rec.call(
                "RetrievalRepository",
                "vector",
                retrieval.vector(
                    user,
                    _vector(1),
                    limit=10,
                    memories=True,
                    messages=True,
                    types=types,
                    exact=exact,
                    model=LOCAL_MODEL_ID,
                    when=time,
                    passage_weight=weight,
                    tags=tags,
                ),
            )
        keys = [(Source.MEMORY, ids[0]), (Source.MESSAGE, stored[0].id)]
        await rec.call("RetrievalRepository", "fetch", retrieval.fetch(user, keys, time))
        await rec.call(
            "RetrievalRepository",
            "fetch_around",
            retrieval.fetch_around(user, keys, [stored[1].id], time),
        )
    await rec.call("RetrievalRepository", "vectors", retrieval.vectors(user, keys))
    # The shared spaces' statements (retrieval/shared.py): each owner a branch pinned to its
    # own id, in one statement or one per owner (`split`, as on Citus).
    owners = [space_owner(f"s-{uuid.uuid4().hex[:6]}"), space_owner(f"t-{uuid.uuid4().hex[:6]}")]
    shared = {"memories": True, "messages": False, "types": ["fact"], "k1": 1.2, "b": 0.75}
    for split in (False, True):
        await rec.call("RetrievalRepository", "sizes", retrieval.sizes(owners, split=split))
        await rec.call(
            "RetrievalRepository",
            "keyword_each",
            retrieval.keyword_each(
                owners, "Rex", limit=5, split=split, when=when, tags=TagFilter(["work"]), **shared
            ),
        )
        await rec.call(
            "RetrievalRepository",
            "keyword_each",
            retrieval.keyword_each(
                owners, "Rex", [[ids[0]], []], terms=3, min_df=1, limit=5, split=split, **shared
            ),
        )
        await rec.call(
            "RetrievalRepository",
            "vector_each",
            retrieval.vector_each(
                owners, _vector(1), exact=[True, False], limit=5, model=LOCAL_MODEL_ID,
                types=["fact"], tags=TagFilter(["work"]), when=when, split=split,
            ),
        )  # fmt: skip
        await rec.call(
            "RetrievalRepository",
            "rows_each",
            retrieval.rows_each(owners, [[ids[0]], [ids[1]]], [ids[0]], when=when, split=split),
        )
    # The copies of spaces (app/services/query/space_cache.py): their versions, memories and
    # postings, each pinned to its owner.
    await rec.call(
        "RetrievalRepository", "space_versions", retrieval.space_versions(owners, "Rex", "")
    )
    await rec.call("RetrievalRepository", "space_items", retrieval.space_items(owners[0]))
    await rec.call("RetrievalRepository", "space_postings", retrieval.space_postings(owners[0]))
    await rec.call("RetrievalRepository", "citus_loaded", retrieval.citus_loaded())
    shards = ShardRepository(session)
    citus = await rec.call("ShardRepository", "citus", shards.citus())
    # Citus' catalog is not there on plain Postgres: the statement is recorded (and checked)
    # before it fails, in a savepoint the rest of the driver's transaction survives.
    with contextlib.suppress(DBAPIError) if not citus else contextlib.nullcontext():
        async with session.begin_nested():
            await rec.call("ShardRepository", "placement", shards.placement(user, ["messages"]))
    await rec.call("RetrievalRepository", "item_count", retrieval.item_count(user))
    await rec.call("RetrievalRepository", "search_size", retrieval.search_size(user, up_to=5))

    agent = AgentMemoryRepository(session)
    await rec.call("AgentMemoryRepository", "lock_saves", agent.lock_saves(user))
    chat_turns = ChatTurnRepository(session)
    await rec.call("ChatTurnRepository", "lock_key", chat_turns.lock_key(user, "k"))
    await rec.call("ChatTurnRepository", "find", chat_turns.find(user, "k"))
    await rec.call("AgentMemoryRepository", "message", agent.message(user, stored[1].id))
    await rec.call("AgentMemoryRepository", "turn_before", agent.turn_before(user, stored[1]))
    for deleted in (True, False):
        await rec.call(
            "AgentMemoryRepository",
            "rating_memories",
            agent.rating_memories(user, stored[0].id, include_deleted=deleted),
        )
    for kind in (None, "fact"):
        await rec.call(
            "AgentMemoryRepository",
            "live_page",
            agent.live_page(user, limit=5, offset=0, type=kind),
        )

    admin = AdminMemoryRepository(session)
    filters = [
        MemoryFilter(user),
        MemoryFilter(
            user,
            type="fact",
            q="park",
            created_after=now - timedelta(days=1),
            created_before=now + timedelta(days=1),
            include_deleted=True,
        ),
    ]
    for f in filters:
        await rec.call("AdminMemoryRepository", "list", admin.list(f, limit=5, offset=0))
    await rec.call("AdminMemoryRepository", "get", admin.get(user, ids[0]))
    await rec.call("AdminMemoryRepository", "get_many", admin.get_many(user, ids))
    await rec.call("AdminMemoryRepository", "ids_by_hash", admin.ids_by_hash(user, [f"{user}-0"]))
    await rec.call(
        "AdminMemoryRepository", "update", admin.update(user, ids[0], {"importance": 0.9})
    )
    await rec.call("AdminMemoryRepository", "set_deleted", admin.set_deleted(user, ids[1], True))
    await rec.call(
        "AdminMemoryRepository",
        "nearest",
        admin.nearest(user, LOCAL_MODEL_ID, [_vector(20), _vector(21)], min_cosine=0.0, k=3),
    )

    keys_repo = ApiKeyRepository(session)
    key = await rec.call(
        "ApiKeyRepository",
        "insert",
        keys_repo.insert(
            key_hash=uuid.uuid4().hex,
            prefix="pgr_test",
            user_id=user,
            scope="read",
            expires_at=None,
        ),
    )
    await rec.call("ApiKeyRepository", "find_by_hash", keys_repo.find_by_hash(key.key_hash))
    for who in (user, None):
        await rec.call("ApiKeyRepository", "list", keys_repo.list(who))
    await rec.call("ApiKeyRepository", "touch", keys_repo.touch(key.id))
    await rec.call("ApiKeyRepository", "revoke", keys_repo.revoke(key.id))

    maintenance = MaintenanceRepository(session)
    for table in ("memory_items", "messages"):
        await rec.call("MaintenanceRepository", "embedding_rows", maintenance.embedding_rows(table))
        await rec.call("MaintenanceRepository", "index_state", maintenance.index_state(table))
        await rec.call(
            "MaintenanceRepository", "column_dimension", maintenance.column_dimension(table)
        )
        await rec.call("MaintenanceRepository", "model_counts", maintenance.model_counts(table))
        await rec.call(
            "MaintenanceRepository", "models_sampled", maintenance.models_sampled(table, 10)
        )
        await rec.call(
            "MaintenanceRepository",
            "stale_batch",
            maintenance.stale_batch(table, "other-model", None, 2),
        )
        row_id = ids[0] if table == "memory_items" else stored[0].id
        rows = [StaleRow(row_id, "x", f"{user}-0" if table == "memory_items" else None)]
        await rec.call(
            "MaintenanceRepository",
            "write_embeddings",
            maintenance.write_embeddings(table, "other-model", rows, [_vector(3)]),
        )
    await rec.call(
        "MaintenanceRepository",
        "rebuild_index",
        maintenance.rebuild_index("messages", 10, 100, LOCAL_DIMENSION),
    )
    await rec.call(
        "MaintenanceRepository",
        "users_with_vectors",
        maintenance.users_with_vectors("memory_items", 0),
    )
    own = await rec.call(
        "MaintenanceRepository",
        "build_user_index",
        maintenance.build_user_index("memory_items", user, 10, 5),
    )
    await rec.call(
        "MaintenanceRepository",
        "user_index_states",
        maintenance.user_index_states("memory_items"),
    )
    await rec.call(
        "MaintenanceRepository",
        "drop_user_index",
        maintenance.drop_user_index("memory_items", own),
    )

    # Validity (supersession) of memory items.
    at = await rec.call("MemoryRepository", "now", memories.now())
    await rec.call("MemoryRepository", "close", memories.close(user, ids[1], at))
    await rec.call("MemoryRepository", "successor", memories.successor(user, ids[0]))
    await rec.call("MemoryRepository", "chain", memories.chain(user, ids[0]))

    portable = PortableRepository(session)
    await rec.call("PortableRepository", "counts", portable.counts(user))
    for name in ("conversations", "messages", "memories"):
        await rec.call("PortableRepository", name, _drain(getattr(portable, name)(user)))
    await rec.call("PortableRepository", "existing_ids", portable.existing_ids(user, ids))
    await rec.call(
        "PortableRepository", "link_memories", portable.link_memories(user, [(ids[0], ids[1])])
    )
    imported = uuid.uuid4()
    await rec.call(
        "PortableRepository",
        "insert_conversations",
        portable.insert_conversations([{"id": imported, "user_id": user, "title": "imported"}]),
    )
    message_row = {
        "id": uuid.uuid4(),
        "conversation_id": imported,
        "user_id": user,
        "role": "user",
        "content": "imported turn",
        "embedding": _vector(60),
        "embedding_model": LOCAL_MODEL_ID,
        "correlation_id": uuid.uuid4(),
        "metadata_": {},
    }
    await rec.call("PortableRepository", "insert_messages", portable.insert_messages([message_row]))
    memory_row = {
        "id": uuid.uuid4(),
        "user_id": user,
        "content": "imported memory",
        "content_hash": f"{user}-imported",
        "type": "fact",
        "embedding": _vector(61),
        "embedding_model": LOCAL_MODEL_ID,
    }
    await rec.call("PortableRepository", "insert_memories", portable.insert_memories([memory_row]))

    store = StoreRepository(session)
    fields = {
        "content": "prefers tea",
        "content_hash": f"{user}-store",
        "type": "preference",
        "embedding": _vector(62),
        "embedding_model": LOCAL_MODEL_ID,
        "source": "store",
        "metadata_": {"value": {"drink": "tea"}},
    }
    await rec.call("StoreRepository", "upsert", store.upsert(user, "prefs.food", "drink", fields))
    got = await rec.call("StoreRepository", "get", store.get(user, "prefs.food", "drink"))
    await rec.call("StoreRepository", "refresh_ttl", store.refresh_ttl(user, [got.id]))
    await rec.call("StoreRepository", "sweep", store.sweep(user))
    for value_filter in (None, {"drink": "tea"}, {"n": {"$gte": 1, "$ne": 3}}):
        await rec.call(
            "StoreRepository",
            "newest",
            store.newest(user, "prefs", value_filter, limit=5, offset=0),
        )
        await rec.call(
            "StoreRepository",
            "nearest",
            store.nearest(
                user, "prefs", value_filter, _vector(62), LOCAL_MODEL_ID, limit=5, offset=0
            ),
        )
    await rec.call("StoreRepository", "namespaces", store.namespaces(user))
    await rec.call(
        "StoreRepository", "close_current", store.close_current(user, "prefs.food", "drink")
    )
    await rec.call("StoreRepository", "upsert", store.upsert(user, "prefs.food", "drink", fields))
    await rec.call("StoreRepository", "delete", store.delete(user, "prefs.food", "drink"))

    extraction = ExtractionRepository(session)
    await rec.call(
        "ExtractionRepository", "enqueue", extraction.enqueue(user, conv.id, [stored[0].id])
    )
    token = uuid.uuid4()
    claimed = await rec.call(
        "ExtractionRepository", "claim", extraction.claim(token, batch=5, lease_s=30.0)
    )
    job_ids = [j.id for j in claimed if j.user_id == user] or [uuid.uuid4()]
    await rec.call("ExtractionRepository", "messages", extraction.messages(user, [stored[0].id]))
    await rec.call("ExtractionRepository", "hold", extraction.hold(user, token, job_ids))
    await rec.call(
        "ExtractionRepository",
        "settle",
        extraction.settle(user, token, job_ids, [0] * len(job_ids), state="done"),
    )
    today = now.date()
    await rec.call(
        "ExtractionRepository", "reserve_tokens", extraction.reserve_tokens(user, today, 10, 100)
    )
    await rec.call(
        "ExtractionRepository", "settle_tokens", extraction.settle_tokens(user, today, 10, 5)
    )
    await rec.call("ExtractionRepository", "jobs", extraction.jobs(user))
    stats = ExtractionStatsRepository(session)
    await rec.call("ExtractionStatsRepository", "summary", stats.summary(today, 5))

    await rec.call(
        "ConversationRepository",
        "delete_last_message",
        conversations.delete_last_message(user, conv.id),
    )
    await rec.call(
        "ConversationRepository", "delete_messages", conversations.delete_messages(user, conv.id)
    )

    # Shared spaces (migration 0019): their own tables, and a space's memories pinned to its
    # owner key (`space:<id>`) like a user's.
    spaces = SpaceRepository(session)
    space = f"scope-{uuid.uuid4().hex[:8]}"
    await rec.call("SpaceRepository", "create", spaces.create(space, "driven"))
    await rec.call("SpaceRepository", "get", spaces.get(space))
    await rec.call("SpaceRepository", "list", spaces.list())
    await rec.call("SpaceRepository", "grant", spaces.grant(space, user, "read"))
    await rec.call("SpaceRepository", "members", spaces.members(space))
    await rec.call("SpaceRepository", "memberships", spaces.memberships(user))
    await rec.call("SpaceRepository", "access", spaces.access(user, space))
    await rec.call("SpaceRepository", "revoke", spaces.revoke(space, user))
    await rec.call("SpaceRepository", "delete", spaces.delete(space))

    directory = UserDirectoryRepository(session)
    await rec.call("UserDirectoryRepository", "page", directory.page(user, limit=5, offset=0))
    await rec.call("UserDirectoryRepository", "counts", directory.counts([user]))

    await rec.call("SearchIndexRepository", "clear", SearchIndexRepository(session).clear(user))
    purge = PurgeRepository(session)
    await rec.call("PurgeRepository", "counts", purge.counts(user))
    await rec.call("PurgeRepository", "delete_user", purge.delete_user(user))


async def drive_bulk(conn: asyncpg.Connection, rec: Recorder, user: str) -> None:
    repo = BulkRepository(RecordingConnection(conn, rec))  # type: ignore[arg-type]
    rows = [
        BulkMemory(
            uuid.uuid4(),
            user,
            f"bulk memory {i}",
            f"bulk-{i}",
            "note",
            _vector(40 + i),
            LOCAL_MODEL_ID,
            0.5,
            datetime.now(UTC),
        )
        for i in range(3)
    ]
    await rec.call("BulkRepository", "register_codecs", repo.register_codecs())
    await rec.call("BulkRepository", "copy_memories", repo.copy_memories(rows))
    await rec.call("BulkRepository", "index_memories", repo.index_memories([r.id for r in rows]))
    await rec.call("BulkRepository", "analyze", repo.analyze())


@pytest.fixture
async def recorded(
    pg: EmbeddedPostgres, db_engine: AsyncEngine, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> Recorder:
    rec = Recorder()

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        rec.sql(statement)

    # The query path's reads go to asyncpg itself (SessionBound._rows): recorded as sent.
    rows = SessionBound._rows

    async def recorded_rows(self: SessionBound, sql: str, params: Any) -> Any:
        rec.sql(positional(sql)[0])
        return await rows(self, sql, params)

    monkeypatch.setattr(SessionBound, "_rows", recorded_rows)
    event.listen(db_engine.sync_engine, "before_cursor_execute", hook)
    try:
        async with create_sessionmaker(db_engine)() as session:
            await session.begin()
            try:
                await drive_session(session, rec, user_id)
            finally:
                await session.rollback()
    finally:
        event.remove(db_engine.sync_engine, "before_cursor_execute", hook)
    conn = await asyncpg.connect(database(pg.url, make_url(pg.url).database or "postgres").dsn)
    try:
        tx = conn.transaction()
        await tx.start()
        try:
            await drive_bulk(conn, rec, user_id)
        finally:
            await tx.rollback()
    finally:
        await conn.close()
    return rec


async def test_every_repository_statement_is_pinned_to_one_user(recorded: Recorder) -> None:
    assert recorded.statements, "nothing was captured"
    problems = []
    for label, sql in recorded.statements:
        if label in ALLOWED:
            continue
        for why in violations(sql):
            problems.append(f"{label[0]}.{label[1]}: {why}\n    {' '.join(sql.split())[:300]}")
    for label, table, columns in recorded.copies:
        if label not in ALLOWED:
            problems += [f"{label[0]}.{label[1]}: {why}" for why in copy_violations(table, columns)]
    assert not problems, "statements not scoped by user_id:\n" + "\n".join(problems)


async def test_every_repository_method_is_driven(recorded: Recorder) -> None:
    missing = repository_methods() - recorded.called
    assert not missing, f"repository methods the scope test does not call: {sorted(missing)}"
    stale = set(ALLOWED) - repository_methods()
    assert not stale, f"allow-list entries for methods that no longer exist: {sorted(stale)}"


async def test_allowed_methods_really_span_users(recorded: Recorder) -> None:
    """An allow-list entry whose statements are all pinned is stale: remove it."""
    pinned_only = []
    for label in ALLOWED:
        statements = [sql for lab, sql in recorded.statements if lab == label]
        if statements and not any(violations(sql) for sql in statements):
            pinned_only.append(label)
    assert not pinned_only, f"allowed but already scoped: {pinned_only}"
