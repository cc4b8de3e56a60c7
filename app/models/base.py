"""Declarative base with a naming convention, and the deployment's embedding dimension."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

import numpy as np
from pgvector import Vector
from pgvector.sqlalchemy import HALFVEC
from sqlalchemy import DateTime, Index, MetaData, String, func, text
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement

from app.domain import USER_ID_LENGTH
from app.vectors import COVERING_MAX_DIMENSION, vector_literal

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# The vector width is part of the schema, fixed per deployment when the first migration runs
# (384 for the local MiniLM model, 1536 for text-embedding-3-small). It is read here, once,
# because the ORM column type must match the table that migration created.
EMBEDDING_DIMENSION = int(os.environ.get("PGRECALL_EMBEDDING_DIMENSION", "384"))

# Migration 0017_halfvec_covering: the covering indexes of the exact path exist up to this width
# (app/vectors.py).
COVERING_INDEXES = EMBEDDING_DIMENSION <= COVERING_MAX_DIMENSION


def search_indexes(table: str) -> tuple[Index, Index]:
    """The two search indexes of a table with `content` and `embedding`: ivfflat over the
    vectors (cosine) and GIN over the English lexemes of the text."""
    return (
        Index(
            f"idx_{table}_embedding",
            "embedding",
            postgresql_using="ivfflat",
            postgresql_with={"lists": 100},
            postgresql_ops={"embedding": "halfvec_cosine_ops"},
        ),
        Index(
            f"idx_{table}_content_fts",
            text("to_tsvector('english'::regconfig, content)"),
            postgresql_using="gin",
        ),
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


# A scoped request's agent and run (app/db.py sets them in every transaction it scopes): the
# default of a row's scope columns, so every write of such a request is stamped with its scope.
AGENT_DEFAULT = "nullif(current_setting('pgrecall.agent_id', true), '')"
RUN_DEFAULT = "nullif(current_setting('pgrecall.run_id', true), '')"


class ScopedMixin:
    """The agent and run a row belongs to within its user's memory (NULL: unscoped);
    migration 0019_memory_scopes, docs/agents.md."""

    agent_id: Mapped[str | None] = mapped_column(
        String(USER_ID_LENGTH), nullable=True, server_default=text(AGENT_DEFAULT)
    )
    run_id: Mapped[str | None] = mapped_column(
        String(USER_ID_LENGTH), nullable=True, server_default=text(RUN_DEFAULT)
    )

    @classmethod
    def in_this_scope(cls) -> list[ColumnElement[bool]]:
        """Conditions for the rows of the transaction's own scope: those its writes create (the
        unscoped ones in a transaction that names no agent or run). Where one scope's row is
        meant (a text's current memory, a store address), not everything the scope may read."""
        return [
            cls.agent_id.is_not_distinct_from(text(AGENT_DEFAULT)),
            cls.run_id.is_not_distinct_from(text(RUN_DEFAULT)),
        ]


class CreatedAtMixin:
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )


# CREATE EXTENSION only when the extension is missing: on a Citus coordinator even
# `CREATE EXTENSION IF NOT EXISTS` is forwarded to the workers, where only the extension's owner
# (a superuser) may run it, so the owner role's migrations failed on a cluster whose nodes
# already had pgvector (docs/scaling.md).
CREATE_VECTOR_EXTENSION = (
    "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'vector') "
    "THEN CREATE EXTENSION vector; END IF; END $$"
)


class HalfVec(HALFVEC):
    """An embedding column: `halfvec(n)` in Postgres (app/vectors.py), float32 arrays in Python.
    pgvector's own HALFVEC reads values back as HalfVector objects; this reads them as the
    arrays the rest of the code computes with, and writes them with vector_literal."""

    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Any:
        def process(value: Any) -> str | None:
            return None if value is None else vector_literal(value)

        return process

    def result_processor(self, dialect: Dialect, coltype: Any) -> Any:
        def process(value: Any) -> np.ndarray[Any, np.dtype[np.float32]] | None:
            # Postgres prints a halfvec as a vector's text: pgvector's parser reads it.
            return None if value is None else Vector.from_text(value).to_numpy()

        return process
