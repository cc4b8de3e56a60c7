"""Tags on memory items, per-memory usage data (for the per-user cap's eviction order).

- `tags text[]`: short labels (app/schemas/common.py: TAG_PATTERN, at most MAX_TAGS), a GIN
  index (`array_ops`) serves `tags && :any` and `tags @> :all` of query_memory's tag filter.
- `last_retrieved_at`, `times_retrieved`: written after query_memory answered (one batched
  UPDATE per answer, off the response path: app/services/usage.py). The cap evicts the least
  valuable memories first: lowest importance, least recently retrieved, oldest.
- `evicted_at`: set with deleted_at when the cap soft-deleted the memory (an admin restores it
  like any soft delete, which clears it).

Revision ID: 0014_tags_usage
Revises: 0013_conversation_settings
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014_tags_usage"
down_revision: str | None = "0013_conversation_settings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "memory_items",
        sa.Column(
            "tags",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            server_default=sa.text("'{}'::text[]"),
        ),
    )
    op.add_column(
        "memory_items",
        sa.Column("last_retrieved_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.add_column(
        "memory_items",
        sa.Column("times_retrieved", sa.BigInteger(), nullable=False, server_default="0"),
    )
    # Set (with deleted_at) when the per-user cap soft-deleted the memory; a restore clears it.
    op.add_column(
        "memory_items", sa.Column("evicted_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_check_constraint(
        op.f("ck_memory_items_tags_count"),
        "memory_items",
        "cardinality(tags) <= 16",  # MAX_TAGS (app/models/base.py)
    )
    op.create_index("idx_memory_items_tags", "memory_items", ["tags"], postgresql_using="gin")


def downgrade() -> None:
    op.drop_index("idx_memory_items_tags", table_name="memory_items")
    op.drop_constraint(op.f("ck_memory_items_tags_count"), "memory_items", type_="check")
    op.drop_column("memory_items", "evicted_at")
    op.drop_column("memory_items", "times_retrieved")
    op.drop_column("memory_items", "last_retrieved_at")
    op.drop_column("memory_items", "tags")
