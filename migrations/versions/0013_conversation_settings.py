"""Conversation-level settings: an LLM extraction override and the rolling summary.

`conversations.extraction` overrides the service's extraction default for one conversation
(NULL: follow PGRECALL_EXTRACTION_DEFAULT). `summary` is the short rolling summary the
extraction worker keeps (docs/extraction.md), `summary_seq` the last message it covers and
`summary_updated_at` when it was written. The table keeps its row-level security (0003_rls).

Revision ID: 0013_conversation_settings
Revises: 0010_distributable
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_conversation_settings"
down_revision: str | None = "0010_distributable"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("conversations", sa.Column("extraction", sa.Boolean(), nullable=True))
    op.add_column("conversations", sa.Column("summary", sa.Text(), nullable=True))
    op.add_column("conversations", sa.Column("summary_seq", sa.BigInteger(), nullable=True))
    op.add_column(
        "conversations",
        sa.Column("summary_updated_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    for column in ("summary_updated_at", "summary_seq", "summary", "extraction"):
        op.drop_column("conversations", column)
