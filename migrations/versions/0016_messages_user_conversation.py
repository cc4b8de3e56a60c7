"""The turns of a conversation through one index: (user_id, conversation_id, seq).

Every statement names the user (tests/repositories/test_user_scope.py), and the query path's
neighbour lookup (the turn before and after a seed message, app/repositories/retrieval/
context.py) reads `user_id = X AND conversation_id = Y AND seq < Z ORDER BY seq DESC LIMIT 1`.
With the index on (conversation_id, seq) Postgres answered it by a BitmapAnd with the user_id
index (a bitmap of every message of the user, per seed) and a sort; on (user_id,
conversation_id, seq) it is one ordered index range that stops at the first row
(docs/performance.md, "The turns around a seed"). The index replaces the old one: each of its
readers names the user too, and the foreign key (user_id, conversation_id) -> conversations is
now backed by an index on exactly its columns.

Revision ID: 0016_messages_user_conversation
Revises: 0015_session_goal
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016_messages_user_conversation"
down_revision: str | None = "0015_session_goal"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "idx_messages_user_conversation_seq", "messages", ["user_id", "conversation_id", "seq"]
    )
    op.drop_index("idx_messages_conversation_id", table_name="messages")


def downgrade() -> None:
    op.create_index("idx_messages_conversation_id", "messages", ["conversation_id", "seq"])
    op.drop_index("idx_messages_user_conversation_seq", table_name="messages")
