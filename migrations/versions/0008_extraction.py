"""LLM extraction: a job per user turn, and tokens spent per user and day.

`extraction_jobs` holds one row per user turn to extract from (unique per message: enqueueing
twice is a no-op). Workers claim queued rows with FOR UPDATE SKIP LOCKED, batched per
conversation, and mark them done in the same transaction that stores what they extracted, so a
retried job never stores twice. `extraction_usage` counts the tokens the endpoint reported, per
user and UTC day, and is where the per-user cap is reserved atomically.

A job references its message (deleted with it, and so with its conversation); conversation_id
is copied for batching without a second foreign key, to keep the append's INSERT cheap.

Both tables carry user_id and get the same row-level security as migration 0003_rls.

Revision ID: 0008_extraction
Revises: 0004_write_path (chained after issue 14A; the lead re-chains at merge)
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008_extraction"
down_revision: str | None = "0004_write_path"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("extraction_jobs", "extraction_usage")
USER_MATCH = "user_id = current_setting('pgrecall.user_id', true)"
ADMIN_MODE = "current_setting('pgrecall.admin', true) = 'on'"
# Workers claim jobs across users in this mode (app/db.py: job_queue_sessions): every user's job
# rows, and no other table's rows, so a claim needs neither the admin mode nor its audit line.
JOB_QUEUE = "current_setting('pgrecall.job_queue', true) = 'on'"


def upgrade() -> None:
    op.create_table(
        "extraction_jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.String(255), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("message_id", sa.Uuid(), nullable=False),
        sa.Column("state", sa.String(10), server_default="queued", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "next_attempt_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.Column("claimed_by", sa.Uuid(), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("tokens_used", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "outcome", postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'done', 'failed', 'dead')",
            name=op.f("ck_extraction_jobs_state"),
        ),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_extraction_jobs_message_id_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_extraction_jobs")),
    )
    op.create_index("uq_extraction_jobs_message_id", "extraction_jobs", ["message_id"], unique=True)
    op.create_index("idx_extraction_jobs_user_id", "extraction_jobs", ["user_id"])
    # What workers scan: jobs that are due (queued) or whose worker's lease may have run out.
    op.create_index(
        "idx_extraction_jobs_due",
        "extraction_jobs",
        ["next_attempt_at"],
        postgresql_where=sa.text("state IN ('queued', 'running')"),
    )
    op.create_index(
        "idx_extraction_jobs_conversation",
        "extraction_jobs",
        ["conversation_id", "created_at"],
        postgresql_where=sa.text("state IN ('queued', 'running')"),
    )
    op.create_table(
        "extraction_usage",
        sa.Column("user_id", sa.String(255), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("reserved", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("calls", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("user_id", "day", name=op.f("pk_extraction_usage")),
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
    op.execute(
        "CREATE POLICY extraction_jobs_claim ON extraction_jobs "
        f"USING ({JOB_QUEUE}) WITH CHECK ({JOB_QUEUE})"
    )


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table)
