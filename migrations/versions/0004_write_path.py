"""Memory validity and supersession: valid_from, valid_to, supersedes_id.

A memory item is valid from `valid_from` until `valid_to` (NULL: still valid). Superseding an
item closes it (valid_to) and inserts its replacement with `supersedes_id` pointing back, in one
transaction (app/services/supersession.py). Chains are linear: an item is superseded at most
once (unique supersedes_id), which also serves the "newer version" lookup of the history routes.
Both ends of a link belong to the same user; the service enforces that (it only ever links an
item it read in the user's own scope), row-level security keeps each user to their own rows.

The content-hash uniqueness now holds among valid items only, so a text that was superseded
("lives in Berlin") can be stated again later as a new, valid item.

Revision ID: 0004_write_path
Revises: 0003_rls
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_write_path"
down_revision: str | None = "0003_rls"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "memory_items",
        sa.Column(
            "valid_from",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=True,
        ),
    )
    op.add_column("memory_items", sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True))
    op.add_column("memory_items", sa.Column("supersedes_id", sa.Uuid(), nullable=True))
    op.execute("UPDATE memory_items SET valid_from = created_at")
    op.alter_column("memory_items", "valid_from", nullable=False)
    op.create_foreign_key(
        op.f("fk_memory_items_supersedes_id_memory_items"),
        "memory_items",
        "memory_items",
        ["supersedes_id"],
        ["id"],
        ondelete="SET NULL",
    )
    op.create_check_constraint(
        op.f("ck_memory_items_not_self_superseding"), "memory_items", "supersedes_id <> id"
    )
    op.create_check_constraint(
        op.f("ck_memory_items_valid_window"),
        "memory_items",
        "valid_to IS NULL OR valid_to >= valid_from",
    )
    op.create_index("uq_memory_items_supersedes_id", "memory_items", ["supersedes_id"], unique=True)
    # The retrieval filter "valid now" (deleted_at IS NULL AND valid_to IS NULL) by user.
    op.create_index(
        "idx_memory_items_current",
        "memory_items",
        ["user_id"],
        postgresql_where=sa.text("deleted_at IS NULL AND valid_to IS NULL"),
    )
    op.drop_index("uq_memory_items_user_content_hash", table_name="memory_items")
    op.create_index(
        "uq_memory_items_user_content_hash",
        "memory_items",
        ["user_id", "content_hash"],
        unique=True,
        postgresql_where=sa.text("valid_to IS NULL"),
    )


def downgrade() -> None:
    # Closed versions would break the old all-rows uniqueness and have no meaning without
    # validity: only the valid items survive a downgrade.
    op.execute("UPDATE memory_items SET supersedes_id = NULL WHERE supersedes_id IS NOT NULL")
    op.execute(
        """
        WITH gone AS (
            DELETE FROM memory_items WHERE valid_to IS NOT NULL RETURNING id, user_id
        ), postings AS (
            DELETE FROM search_postings AS p USING gone
            WHERE p.user_id = gone.user_id AND p.item_id = gone.id AND p.source = 0
            RETURNING p.user_id, p.item_id, p.dl
        ), lengths AS (
            SELECT user_id, sum(dl) AS dl
            FROM (SELECT DISTINCT user_id, item_id, dl FROM postings) AS per_item
            GROUP BY user_id
        ), counts AS (
            SELECT user_id, count(*) AS n FROM gone GROUP BY user_id
        )
        UPDATE search_stats AS s
           SET doc_count = greatest(0, s.doc_count - counts.n),
               total_length = greatest(0, s.total_length - coalesce(lengths.dl, 0))
          FROM counts LEFT JOIN lengths USING (user_id)
         WHERE s.user_id = counts.user_id
        """
    )
    op.drop_index("uq_memory_items_user_content_hash", table_name="memory_items")
    op.create_index(
        "uq_memory_items_user_content_hash",
        "memory_items",
        ["user_id", "content_hash"],
        unique=True,
    )
    op.drop_index("idx_memory_items_current", table_name="memory_items")
    op.drop_index("uq_memory_items_supersedes_id", table_name="memory_items")
    op.drop_constraint(op.f("ck_memory_items_valid_window"), "memory_items", type_="check")
    op.drop_constraint(op.f("ck_memory_items_not_self_superseding"), "memory_items", type_="check")
    op.drop_constraint(
        op.f("fk_memory_items_supersedes_id_memory_items"), "memory_items", type_="foreignkey"
    )
    op.drop_column("memory_items", "supersedes_id")
    op.drop_column("memory_items", "valid_to")
    op.drop_column("memory_items", "valid_from")
