"""Key-addressable memories for the framework adapters (the LangGraph store).

A memory written through /v1/store carries the caller's namespace (labels joined with '.',
which LangGraph forbids inside a label) and key. One valid row per (user, namespace, key): a
put replaces the value in place and a put on a deleted key revives that row; a version closed
by supersession (an admin content edit) keeps its address as history and frees the key.
Ordinary memories leave both columns NULL.

Revision ID: 0005_adapters
Revises: 0004_write_path
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_adapters"
down_revision: str | None = "0004_write_path"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("memory_items", sa.Column("store_namespace", sa.Text(), nullable=True))
    op.add_column("memory_items", sa.Column("store_key", sa.Text(), nullable=True))
    op.create_check_constraint(
        op.f("ck_memory_items_store_address"),
        "memory_items",
        "(store_namespace IS NULL) = (store_key IS NULL)",
    )
    # text_pattern_ops: a namespace prefix is a LIKE 'a.b.%' match, which this index serves.
    op.create_index(
        "uq_memory_items_store_address",
        "memory_items",
        ["user_id", "store_namespace", "store_key"],
        unique=True,
        postgresql_ops={"store_namespace": "text_pattern_ops"},
        postgresql_where=sa.text("store_key IS NOT NULL AND valid_to IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_memory_items_store_address", table_name="memory_items")
    op.drop_constraint(op.f("ck_memory_items_store_address"), "memory_items", type_="check")
    op.drop_column("memory_items", "store_key")
    op.drop_column("memory_items", "store_namespace")
