"""Build a benchmark store: its own database, real embeddings (cached on disk), bulk load.

Each size lives in its own database of one Postgres server, created by the real migrations and
filled through app.repositories.bulk (COPY + set-based postings), then indexed for its size.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.db import create_engine, create_sessionmaker
from app.embedding_models import DEFAULT_MODEL_ID
from app.migrate import ROOT, upgrade_head
from app.repositories.bulk import BulkMemory, BulkRepository
from app.repositories.maintenance import lists_for
from app.services.memory import content_hash
from app.services.reindex import reindex
from bench.corpus import Memory, UserLayout, fingerprint, generate, layout

log = logging.getLogger("bench")
Vectors = npt.NDArray[np.float32]
_CHUNK = 20_000
_SAVE_EVERY = 10_000


@dataclass(frozen=True)
class Database:
    name: str
    url: str  # SQLAlchemy (postgresql+asyncpg://), for the service and repositories
    dsn: str  # libpq form, for raw asyncpg


def database(server_url: str, name: str) -> Database:
    """The URLs of database `name` on the server behind `server_url`."""
    url = make_url(server_url).set(database=name)
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    return Database(name, url.render_as_string(hide_password=False), dsn)


@dataclass
class Store:
    db: Database
    items: int
    seed: int
    users: list[UserLayout]
    memories: list[Memory]  # the distinct texts; item position p uses memories[p % len]
    vectors: Vectors
    lists: int
    load_seconds: dict[str, float]

    def memory_at(self, position: int) -> Memory:
        return self.memories[position % len(self.memories)]

    def vector_at(self, position: int) -> Vectors:
        return self.vectors[position % len(self.memories)]


def corpus_vectors(
    seed: int, count: int, embed: Callable[[list[str]], Vectors], cache_dir: Path
) -> tuple[list[Memory], Vectors]:
    """The first `count` memories of the seed and their real embeddings (cached, resumable)."""
    memories = generate(seed, count)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"vectors-seed{seed}-{fingerprint()}.npy"
    cached = np.load(path) if path.exists() else np.zeros((0, 384), dtype=np.float32)
    if len(cached) >= count:
        return memories, cached[:count]
    parts = [cached]
    done = len(cached)
    started = time.perf_counter()
    while done < count:
        end = min(count, done + _SAVE_EVERY)
        parts.append(embed([m.text for m in memories[done:end]]))
        done = end
        rate = (done - len(cached)) / (time.perf_counter() - started)
        np.save(path, np.concatenate(parts))  # a killed run resumes from here
        log.info("embedded %d/%d texts (%.0f/s)", done, count, rate)
    return memories, np.concatenate(parts)[:count]


def _kmeans_memory_mb(rows: int, lists: int, dimension: int = 384) -> int:
    """maintenance_work_mem pgvector's ivfflat build asks for: the k-means sample (50 rows per
    list) plus Elkan's lower bounds (a float per sample and list): 273 MB at 1M rows."""
    samples = min(rows, lists * 50)
    need = samples * (dimension * 4 + 8) + samples * lists * 4
    return max(256, math.ceil(need / 2**20) + 128)


async def create_database(admin_dsn: str, name: str, *, replace: bool) -> bool:
    """Create the database; False when it exists and replace is off."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if exists and not replace:
            return False
        if exists:
            await conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
        return True
    finally:
        await conn.close()


async def drop_database(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _rows(store: Store) -> Iterator[BulkMemory]:
    rng = random.Random(store.seed + 11)
    now = datetime.now(UTC)
    for user in store.users:
        for position in range(user.start, user.start + user.size):
            memory = store.memory_at(position)
            yield BulkMemory(
                id=uuid.UUID(int=rng.getrandbits(128), version=4),
                user_id=user.user_id,
                content=memory.text,
                content_hash=content_hash(memory.text),
                type=memory.type,
                embedding=store.vector_at(position),
                embedding_model=DEFAULT_MODEL_ID,
                importance=round(rng.uniform(0.2, 0.9), 2),
                created_at=now - timedelta(minutes=rng.randrange(0, 2 * 365 * 24 * 60)),
            )


async def _load(store: Store) -> None:
    """COPY + postings in chunks (one transaction each), then index for the size, ANALYZE."""
    conn = await asyncpg.connect(store.db.dsn)
    try:
        repo = BulkRepository(conn)
        await repo.register_codecs()
        t0 = time.perf_counter()
        copy_s = index_s = 0.0
        rows = _rows(store)
        loaded = 0
        while loaded < store.items:
            chunk = [next(rows) for _ in range(min(_CHUNK, store.items - loaded))]
            async with conn.transaction():
                t = time.perf_counter()
                await repo.copy_memories(chunk)
                copy_s += time.perf_counter() - t
                t = time.perf_counter()
                await repo.index_memories([r.id for r in chunk])
                index_s += time.perf_counter() - t
            loaded += len(chunk)
            log.info("%s: loaded %d/%d items", store.db.name, loaded, store.items)
        t = time.perf_counter()
        # An ivfflat build of 1M rows takes minutes: no client-side command timeout of seconds.
        engine = create_engine(store.db.url, pool_size=1, statement_timeout_ms=3_600_000)
        try:
            async with create_sessionmaker(engine)() as session, session.begin():
                budget = _kmeans_memory_mb(store.items, store.lists)
                await session.execute(text(f"SET LOCAL maintenance_work_mem = '{budget}MB'"))
                rebuilt = await reindex(session, "memory_items")
        finally:
            await engine.dispose()
        store.lists = rebuilt.lists
        vector_index_s = time.perf_counter() - t
        t = time.perf_counter()
        await repo.analyze()
        await conn.execute("VACUUM (ANALYZE) memory_items")  # visibility map: index-only scans
        analyze_s = time.perf_counter() - t
        store.load_seconds = {
            "copy": round(copy_s, 1),
            "postings": round(index_s, 1),
            "ivfflat": round(vector_index_s, 1),
            "analyze_vacuum": round(analyze_s, 1),
            "total": round(time.perf_counter() - t0, 1),
        }
    finally:
        await conn.close()


def _schema_fingerprint() -> str:
    """Changes whenever a migration file changes, so a reused store always has today's schema."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "migrations" / "versions").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


async def build_store(
    server_url: str,
    items: int,
    *,
    seed: int,
    embed: Callable[[list[str]], Vectors],
    out_dir: Path,
    distinct: int = 100_000,
    reuse: bool = True,
    big_size: int = 50_000,
) -> Store:
    """The store of `items` items in database bench_<items>, loading it unless reusable."""
    db = database(server_url, f"bench_{items}")
    admin = database(server_url, "postgres").dsn
    memories, vectors = await asyncio.to_thread(
        corpus_vectors, seed, min(items, distinct), embed, out_dir / "cache"
    )
    users = layout(items, seed, big_size=big_size)
    store = Store(db, items, seed, users, memories, vectors, lists_for(items), {})
    marker = out_dir / f"{db.name}.json"
    meta: dict[str, Any] = {
        "items": items,
        "seed": seed,
        "distinct": len(memories),
        "big_size": big_size,
        "lists": store.lists,
        "schema": _schema_fingerprint(),
    }
    if reuse and marker.exists():
        saved = json.loads(marker.read_text())
        if {k: saved.get(k) for k in meta} == meta and not await create_database(
            admin, db.name, replace=False
        ):
            store.load_seconds = saved.get("load_seconds", {})
            log.info("%s: reusing the loaded store", db.name)
            return store
    marker.unlink(missing_ok=True)
    await create_database(admin, db.name, replace=True)
    await asyncio.to_thread(upgrade_head, db.url)
    await _load(store)
    marker.write_text(json.dumps({**meta, "load_seconds": store.load_seconds}, indent=1))
    log.info("%s: loaded in %s", db.name, store.load_seconds)
    return store
