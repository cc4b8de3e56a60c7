"""Curated memory items, and the keyword index shared by memories and messages."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    REAL,
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Index,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from app.domain import MAX_TAGS, MEMORY_TYPES, USER_ID_LENGTH
from app.models.base import (
    EMBEDDING_DIMENSION,
    Base,
    CreatedAtMixin,
    HalfVec,
    ScopedMixin,
    search_indexes,
)


class MemoryItem(ScopedMixin, CreatedAtMixin, Base):
    __tablename__ = "memory_items"
    __table_args__ = (
        CheckConstraint(f"type IN ({', '.join(repr(t) for t in MEMORY_TYPES)})", name="type"),
        CheckConstraint("importance >= 0 AND importance <= 1", name="importance_range"),
        CheckConstraint("supersedes_id <> id", name="not_self_superseding"),
        CheckConstraint("valid_to IS NULL OR valid_to >= valid_from", name="valid_window"),
        # A shared space's memory belongs to no agent or run (migration 0024).
        CheckConstraint(
            "user_id NOT LIKE 'space:%' OR (agent_id IS NULL AND run_id IS NULL)",
            name="space_unscoped",
        ),
        Index("idx_memory_items_user_id", "user_id", postgresql_where=text("deleted_at IS NULL")),
        Index(
            "idx_memory_items_type", "user_id", "type", postgresql_where=text("deleted_at IS NULL")
        ),
        # Unique among valid items only: a superseded text may be stated again later; per
        # scope (migration 0019: the unscoped memory is one scope too).
        Index(
            "uq_memory_items_user_content_hash",
            "user_id",
            "content_hash",
            "agent_id",
            "run_id",
            unique=True,
            postgresql_where=text("valid_to IS NULL"),
            postgresql_nulls_not_distinct=True,
        ),
        # Retrieval's "valid now" filter, by user.
        Index(
            "idx_memory_items_current",
            "user_id",
            postgresql_where=text("deleted_at IS NULL AND valid_to IS NULL"),
        ),
        # Chains are linear (superseded at most once); also the "newer version" lookup.
        Index("uq_memory_items_supersedes_id", "user_id", "supersedes_id", unique=True),
        # NO ACTION, not SET NULL: Citus refuses SET NULL on a key holding user_id. The app
        # clears a memory's source link before deleting the message (ConversationRepository).
        ForeignKeyConstraint(["user_id", "source_message_id"], ["messages.user_id", "messages.id"]),
        ForeignKeyConstraint(
            ["user_id", "supersedes_id"], ["memory_items.user_id", "memory_items.id"]
        ),
        *search_indexes("memory_items"),
        CheckConstraint("(store_namespace IS NULL) = (store_key IS NULL)", name="store_address"),
        # Tags (migration 0014_tags_usage): `tags && :any` / `tags @> :all` of query_memory.
        CheckConstraint(f"cardinality(tags) <= {MAX_TAGS}", name="tags_count"),
        Index("idx_memory_items_tags", "tags", postgresql_using="gin"),
        Index(
            "uq_memory_items_store_address",
            "user_id",
            "store_namespace",
            "store_key",
            "agent_id",
            "run_id",
            unique=True,
            postgresql_nulls_not_distinct=True,
            postgresql_ops={"store_namespace": "text_pattern_ops"},
            postgresql_where=text("store_key IS NOT NULL AND valid_to IS NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH), nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    content_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    type: Mapped[str] = mapped_column(String(20), nullable=False)
    embedding: Mapped[Any] = mapped_column(HalfVec(EMBEDDING_DIMENSION), nullable=False)
    embedding_model: Mapped[str] = mapped_column(String(100), nullable=False)
    source_message_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    source: Mapped[str | None] = mapped_column(String(500), nullable=True)
    importance: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("0.5"))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    # Set for memories written through /v1/store (the LangGraph adapter): the caller's address.
    store_namespace: Mapped[str | None] = mapped_column(Text, nullable=True)
    store_key: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Validity (migration 0004_write_path): valid from valid_from until valid_to (NULL: still
    # valid). Superseding closes an item and links its replacement back through supersedes_id.
    valid_from: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    supersedes_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    # Short labels (app/schemas/common.py: Tags), filterable by query_memory (any/all).
    tags: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")
    )
    # Usage (written after query_memory answered, app/services/usage.py): the per-user cap
    # evicts the least valuable first (lowest importance, least recently retrieved, oldest).
    last_retrieved_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    times_retrieved: Mapped[int] = mapped_column(
        BigInteger, nullable=False, server_default=text("0")
    )
    # Set with deleted_at when the per-user cap evicted it (a restore clears both).
    evicted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SearchPosting(Base):
    """One (user, lexeme, item) posting: the inverted index BM25 is computed from, in SQL.

    `source` is 0 for a memory item, 1 for a message; `tf` and `dl` are weighted counts (context
    lexemes count the preset's context_weights each, app.domain.ContextWeights).
    """

    __tablename__ = "search_postings"
    __table_args__ = (
        # INCLUDE makes BM25 an index-only scan: no heap visit per posting of a query word.
        PrimaryKeyConstraint(
            "user_id", "lexeme", "item_id", postgresql_include=["source", "tf", "dl"]
        ),
        Index("idx_search_postings_item", "item_id"),
    )

    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH))
    lexeme: Mapped[str] = mapped_column(Text)
    item_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    source: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    tf: Mapped[float] = mapped_column(REAL, nullable=False)
    dl: Mapped[float] = mapped_column(REAL, nullable=False)


class SearchStats(Base):
    """Per-user corpus statistics for BM25 (document count and total length in lexemes)."""

    __tablename__ = "search_stats"

    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH), primary_key=True)
    doc_count: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    total_length: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("0"))
    # A shared space's row: a new value at every write of the space (migration 0024's triggers;
    # the query service's copies of small spaces, app/services/query/space_cache.py). 0 else.
    version: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
