"""Seeding curated memories from a file: validate all, then embed and write in batches.

Safe to re-run: a row whose text the user already has (content hash) is skipped, and each
batch commits, so an interrupted load resumes where it stopped. Rows are processed grouped by
user (file order within a user), which keeps near-duplicate decisions the same as in file
order while a batch touches only a few users.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from tqdm import tqdm

from app.adapters.cache import Cache
from app.db import admin_sessions
from app.repositories.maintenance import MaintenanceRepository
from app.services.admin import AdminMemoryService, memory_input
from app.services.embedding import EmbeddingService, Priority
from app.services.memory import content_hash
from app.services.reindex import ReindexResult, is_stale, reindex
from app.services.seed_file import ParsedFile, RowError, SeedRow, read_seed_file

NEAR_DUPLICATE_COSINE = 0.90
# Enough candidates per row to step past existing items this batch already rewrites.
_NEIGHBOURS = 4


@dataclass(frozen=True)
class SeedOptions:
    skip_invalid: bool = False
    update_near_duplicates: bool = False
    dry_run: bool = False
    batch_size: int = 256
    near_duplicate_cosine: float = NEAR_DUPLICATE_COSINE
    progress: bool = False
    reindex: bool = True


@dataclass(frozen=True)
class NearDuplicate:
    line: int
    user_id: str
    cosine: float
    existing_id: uuid.UUID | None  # a stored memory ...
    existing_line: int | None  # ... or an earlier row of this file not yet stored
    updated: bool

    def __str__(self) -> str:
        target = f"memory {self.existing_id}" if self.existing_id else f"line {self.existing_line}"
        action = "updated it" if self.updated else "added anyway"
        return f"line {self.line}: near-duplicate of {target} (cosine {self.cosine:.3f}), {action}"


@dataclass
class SeedReport:
    rows: int = 0
    invalid: int = 0
    errors: list[RowError] = field(default_factory=list)
    added: int = 0
    updated: int = 0
    skipped: int = 0
    near_duplicates: list[NearDuplicate] = field(default_factory=list)
    elapsed_s: float = 0.0
    dry_run: bool = False
    written: bool = False
    reindex: ReindexResult | None = None
    reindex_due: bool = False

    @property
    def items_per_second(self) -> float:
        done = self.added + self.updated + self.skipped
        return done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> str:
        """One line: added / updated / skipped / invalid and the rate."""
        prefix = "dry run, would have: " if self.dry_run else ""
        return (
            f"{prefix}added {self.added}, updated {self.updated}, skipped {self.skipped}, "
            f"invalid {self.invalid}, near-duplicates {len(self.near_duplicates)}; "
            f"{self.elapsed_s:.1f} s, {self.items_per_second:.0f} items/s"
        )


@dataclass
class _Pending:
    row: SeedRow
    vector: Any
    target: uuid.UUID | None  # None: insert; else the stored memory this row overwrites


async def seed_file(
    source: Path | ParsedFile,
    sessionmaker: async_sessionmaker[AsyncSession],
    embeddings: EmbeddingService,
    *,
    options: SeedOptions = SeedOptions(),
    cache: Cache | None = None,
) -> SeedReport:
    """Load a seed file (validated first; SeedFileError when it is unreadable) or its validated
    rows; writes nothing if any row is invalid, unless skip_invalid."""
    parsed = read_seed_file(source) if isinstance(source, Path) else source
    report = SeedReport(
        rows=parsed.total,
        invalid=len({e.line for e in parsed.errors}),
        errors=parsed.errors,
        dry_run=options.dry_run,
    )
    if parsed.errors and not options.skip_invalid:
        return report
    sessionmaker = admin_sessions(sessionmaker, "seed")  # a file holds many users' rows
    ordered = sorted(parsed.rows, key=lambda r: (r.row.user_id, r.line))
    size = options.batch_size
    batches = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    started = time.perf_counter()
    bar = tqdm(total=len(ordered), unit="row", disable=not options.progress, file=sys.stderr)
    try:
        if options.dry_run:
            # One transaction rolled back at the end: later batches see the earlier ones, so
            # the counts are exactly what a real run would do.
            async with sessionmaker() as session:
                for batch in batches:
                    await _load_batch(session, batch, embeddings, options, report)
                    bar.update(len(batch))
                report.reindex_due = await _reindex_due(session)
                await session.rollback()
        else:
            for batch in batches:
                async with sessionmaker() as session, session.begin():
                    users = await _load_batch(session, batch, embeddings, options, report)
                if cache is not None:
                    for user in users:
                        await cache.invalidate_user(user)
                bar.update(len(batch))
            report.written = True
    finally:
        bar.close()
    report.elapsed_s = time.perf_counter() - started
    report.near_duplicates.sort(key=lambda n: n.line)  # found in user order, shown in file order
    if report.written and options.reindex and (report.added or report.updated):
        async with sessionmaker() as session, session.begin():
            report.reindex = await reindex(session, "memory_items", only_if_stale=True)
    return report


async def _reindex_due(session: AsyncSession) -> bool:
    repo = MaintenanceRepository(session)
    state = await repo.index_state("memory_items")
    return is_stale(state, await repo.embedding_rows("memory_items"))


async def _load_batch(
    session: AsyncSession,
    batch: Sequence[SeedRow],
    embeddings: EmbeddingService,
    options: SeedOptions,
    report: SeedReport,
) -> set[str]:
    """Skip known texts, embed the rest once, then insert or update; returns users written."""
    service = AdminMemoryService(session, embeddings)
    by_user: dict[str, list[SeedRow]] = {}
    for row in batch:
        by_user.setdefault(row.row.user_id, []).append(row)
    fresh: dict[str, list[SeedRow]] = {}
    for user, rows in by_user.items():
        stored = await service.repo.ids_by_hash(user, [content_hash(r.row.content) for r in rows])
        seen: set[str] = set()
        for r in rows:
            digest = content_hash(r.row.content)
            if digest in stored or digest in seen:
                report.skipped += 1
            else:
                seen.add(digest)
                fresh.setdefault(user, []).append(r)
    texts = [r.row.content for rows in fresh.values() for r in rows]
    vectors = await embeddings.embed(texts, priority=Priority.BULK)
    offset = 0
    inserts: list[_Pending] = []
    updates: list[_Pending] = []
    for user, rows in fresh.items():
        user_vectors = vectors[offset : offset + len(rows)]
        offset += len(rows)
        matches = await service.repo.nearest(
            user,
            embeddings.model,
            list(user_vectors),
            min_cosine=options.near_duplicate_cosine,
            k=_NEIGHBOURS,
        )
        plan = plan_user_rows(rows, user_vectors, matches, options, report)
        inserts.extend(p for p in plan if p.target is None)
        updates.extend(p for p in plan if p.target is not None)
    if inserts:
        ids = await service.memories.store(
            [memory_input(p.row.row) for p in inserts], np.stack([p.vector for p in inserts])
        )
        report.added += len(ids)
        report.skipped += len(inserts) - len(ids)  # inserted concurrently by someone else
    for p in updates:
        assert p.target is not None
        item = await service.repo.get(p.row.row.user_id, p.target)
        if item is None:  # purged meanwhile: store the row as new instead
            stored = await service.memories.store([memory_input(p.row.row)], p.vector[None, :])
            report.updated -= 1
            report.added += len(stored)
            report.skipped += 1 - len(stored)
        else:
            await service.replace(item, p.row.row, p.vector)
    return set(fresh)


def plan_user_rows(
    rows: Sequence[SeedRow],
    vectors: Any,
    matches: Sequence[Sequence[tuple[uuid.UUID, float]]],
    options: SeedOptions,
    report: SeedReport,
) -> list[_Pending]:
    """Decide insert or update for one user's new rows, in file order.

    A row is compared with the user's stored memories (`matches`, from SQL, best first) and with
    this batch's earlier rows (which SQL cannot see yet). Stored items an earlier row already
    rewrites are judged by their new vector, through the pending list.
    """
    pending: list[_Pending] = []
    threshold = options.near_duplicate_cosine
    for row, vector, found in zip(rows, vectors, matches, strict=True):
        rewritten = {p.target for p in pending if p.target is not None}
        best: tuple[float, uuid.UUID | None, _Pending | None] | None = None
        for item_id, cosine in found:
            if item_id not in rewritten:
                best = (cosine, item_id, None)
                break
        if pending:
            sims = np.stack([p.vector for p in pending]) @ np.asarray(vector)
            j = int(np.argmax(sims))
            if sims[j] >= threshold and (best is None or sims[j] > best[0]):
                best = (float(sims[j]), None, pending[j])
        if best is None:
            pending.append(_Pending(row, vector, None))
            continue
        cosine, item_id, earlier = best
        existing_id = item_id if earlier is None else earlier.target
        existing_line = earlier.row.line if earlier is not None and earlier.target is None else None
        update = options.update_near_duplicates
        report.near_duplicates.append(
            NearDuplicate(row.line, row.row.user_id, cosine, existing_id, existing_line, update)
        )
        if not update:
            pending.append(_Pending(row, vector, None))
        elif earlier is None:
            report.updated += 1
            pending.append(_Pending(row, vector, item_id))
        else:
            # It rewrites a row this batch has not written yet: that write takes this row's data.
            report.updated += 1
            earlier.row, earlier.vector = row, vector
    return pending
