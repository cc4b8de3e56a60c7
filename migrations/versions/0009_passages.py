"""Sentence passages of messages: one vector per sentence of a multi-sentence turn.

A turn that tells several things ("We moved in May. The kids love the new school.") has one
vector that averages them; a question about one of them matches that sentence far better than
the whole turn. `message_passages` holds a vector per sentence of such turns (turns of one
sentence have none: their vector is the turn's). The query scores a turn by a mix of its whole
vector and its best passage (app/retrieval/presets.py: passage_weight).

Passages are derived data, like the keyword postings: written with their message, deleted
with it (ON DELETE CASCADE), rebuilt by `pgrecall rebuild-passages`. The table carries user_id
and gets the same row-level security as migration 0003_rls; no ANN index (exact per-user scans
on the exact path, a re-score of the ANN candidates otherwise: docs/retrieval.md).

Revision ID: 0009_passages
Revises: 0008_extraction
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import pgvector.sqlalchemy
import sqlalchemy as sa
from alembic import op

from app.models.base import EMBEDDING_DIMENSION

revision: str = "0009_passages"
down_revision: str | None = "0008_extraction"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("message_passages",)
USER_MATCH = "user_id = current_setting('pgrecall.user_id', true)"
ADMIN_MODE = "current_setting('pgrecall.admin', true) = 'on'"


def upgrade() -> None:
    op.create_table(
        "message_passages",
        sa.Column("message_id", sa.Uuid(), nullable=False),
        sa.Column("ord", sa.SmallInteger(), nullable=False),
        sa.Column("user_id", sa.String(255), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.Vector(EMBEDDING_DIMENSION), nullable=False),
        sa.Column("embedding_model", sa.String(100), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_message_passages_message_id_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("message_id", "ord", name=op.f("pk_message_passages")),
    )
    # Inline vectors, as for messages: exact per-user scans read them without TOAST.
    op.execute("ALTER TABLE message_passages ALTER COLUMN embedding SET STORAGE PLAIN")
    # (user_id, message_id): the user's passages in one range (exact path), one message's
    # passages by both keys (ANN path), whatever the statistics say.
    op.create_index(
        "idx_message_passages_user_message", "message_passages", ["user_id", "message_id"]
    )
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY {table}_user ON {table} USING ({USER_MATCH}) WITH CHECK ({USER_MATCH})"
        )
        op.execute(
            f"CREATE POLICY {table}_admin ON {table} USING ({ADMIN_MODE}) WITH CHECK ({ADMIN_MODE})"
        )


def downgrade() -> None:
    op.drop_table("message_passages")
