"""Re-embedding: move every stored vector to the current embedding model.

Rows are selected by `embedding_model`, so the work left is always "rows not on the current
model": each batch commits on its own, and a run that is interrupted simply resumes on the next
start. Texts are embedded outside any transaction; the write re-checks that the row still needs
it (and, for a memory, that its content did not change meanwhile).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from tqdm import tqdm

from app.db import admin_sessions
from app.repositories.maintenance import MaintenanceRepository, Table
from app.services.embedding import EmbeddingService, Priority
from app.services.keywords import all_users
from app.services.passages import rebuild_passages
from app.services.reindex import (
    TABLES,
    ReindexResult,
    UserIndexResult,
    reindex,
    reindex_users,
)


class ReembedError(Exception):
    """The store cannot take the current model's vectors (dimension mismatch)."""


@dataclass
class ReembedReport:
    model: str
    models: dict[Table, dict[str | None, int]] = field(default_factory=dict)
    moved: dict[Table, int] = field(default_factory=dict)
    dry_run: bool = False
    elapsed_s: float = 0.0
    reindexed: list[ReindexResult] = field(default_factory=list)
    user_indexes: list[UserIndexResult] = field(default_factory=list)
    passages: int = 0  # passages made again for the moved messages

    def pending(self, table: Table) -> int:
        """Rows of the table that were not on the current model when the run started."""
        return sum(n for m, n in self.models.get(table, {}).items() if m != self.model)

    def summary(self) -> str:
        """Counts per table, and what was moved."""
        parts = []
        for table in TABLES:
            models = (
                ", ".join(
                    f"{m or '(no vector)'}: {n}"
                    for m, n in sorted(
                        self.models.get(table, {}).items(), key=lambda kv: kv[0] or ""
                    )
                )
                or "empty"
            )
            moved = "" if self.dry_run else f", moved {self.moved.get(table, 0)}"
            parts.append(f"{table}: to move {self.pending(table)} ({models}){moved}")
        head = f"target model {self.model}" + (" (dry run)" if self.dry_run else "")
        made = "" if self.dry_run else f"; passages made {self.passages}"
        return f"{head}; " + "; ".join(parts) + made + f"; {self.elapsed_s:.1f} s"


# Rows per table the start-up looks at: a few pages, whatever the store's size.
SAMPLED_ROWS = 1000


async def other_models(
    sessionmaker: async_sessionmaker[AsyncSession], model: str, rows: int = SAMPLED_ROWS
) -> dict[Table, set[str]]:
    """Embedding models other than `model` among each table's first rows (see
    `MaintenanceRepository.models_sampled`): a store written by another model, or one whose
    re-embedding has not finished. Queries never compare vectors of two models, so such rows
    are found by keywords only until `pgrecall reembed` moves them."""
    found: dict[Table, set[str]] = {}
    async with admin_sessions(sessionmaker, "start-up model check")() as session:
        repo = MaintenanceRepository(session)
        for table in TABLES:
            others = await repo.models_sampled(table, rows) - {model}
            if others:
                found[table] = others
    return found


async def reembed(
    sessionmaker: async_sessionmaker[AsyncSession],
    embeddings: EmbeddingService,
    *,
    batch_size: int = 256,
    dry_run: bool = False,
    progress: bool = False,
    rebuild_indexes: bool = True,
) -> ReembedReport:
    """Re-embed rows whose vector is from another model, in committed batches."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    users_sessionmaker = sessionmaker
    sessionmaker = admin_sessions(sessionmaker, "reembed")  # rewrites every user's vectors
    model = embeddings.model
    report = ReembedReport(model=model, dry_run=dry_run)
    started = time.perf_counter()
    async with sessionmaker() as session:
        repo = MaintenanceRepository(session)
        for table in TABLES:
            width = await repo.column_dimension(table)
            if width != embeddings.dimension:
                raise ReembedError(
                    f"{table}.embedding holds {width} dimensions but {model} makes "
                    f"{embeddings.dimension}: a store changes dimension by `pgrecall export` "
                    "and `pgrecall import` into a new database (docs/admin.md, Re-embedding)"
                )
            report.models[table] = await repo.model_counts(table)
    if dry_run:
        report.elapsed_s = time.perf_counter() - started
        return report
    total = sum(report.pending(t) for t in TABLES)
    with tqdm(total=total, unit="row", disable=not progress, file=sys.stderr) as bar:
        for table in TABLES:
            moved = await _move_table(sessionmaker, embeddings, table, batch_size, bar)
            report.moved[table] = moved
    if report.moved.get("messages"):
        # The old model's passages are dropped and the new model's made, user by user.
        users = await all_users(users_sessionmaker)
        rebuilt = await rebuild_passages(users_sessionmaker, embeddings, users, progress=progress)
        report.passages = rebuilt.passages
    report.elapsed_s = time.perf_counter() - started
    if rebuild_indexes:
        # The old model's centroids mean nothing for the new vectors.
        for table in TABLES:
            if report.moved.get(table):
                async with sessionmaker() as session, session.begin():
                    report.reindexed.append(await reindex(session, table))
                    # Big users' own indexes too (the same set of users: none added or dropped).
                    report.user_indexes.append(await reindex_users(session, table, more_than=None))
    return report


async def _move_table(
    sessionmaker: async_sessionmaker[AsyncSession],
    embeddings: EmbeddingService,
    table: Table,
    batch_size: int,
    bar: tqdm,  # type: ignore[type-arg]
) -> int:
    moved = 0
    after = None
    # Keyset walk by id: each run visits a row at most once, so it always ends; a row skipped
    # because it changed meanwhile is picked up by the next run.
    while True:
        async with sessionmaker() as session:
            rows = await MaintenanceRepository(session).stale_batch(
                table, embeddings.model, after, batch_size
            )
        if not rows:
            return moved
        vectors = await embeddings.embed([r.content for r in rows], priority=Priority.BULK)
        async with sessionmaker() as session, session.begin():
            moved += await MaintenanceRepository(session).write_embeddings(
                table, embeddings.model, rows, vectors
            )
        after = rows[-1].id
        bar.update(len(rows))
