"""The session goal in Postgres: conversations.goal.

The goal of a conversation's session state (set_session_goal) lived only in Redis, so the
embedded defaults (no Redis) answered 503. Postgres is the truth for it as for the messages;
Redis keeps a copy that makes reads faster.

Revision ID: 0015_session_goal
Revises: 0014_tags_usage
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_session_goal"
down_revision: str | None = "0014_tags_usage"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("conversations", sa.Column("goal", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("conversations", "goal")
