"""Extraction jobs (one per user turn) and the tokens extraction spent per user and day."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Date,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from app.domain import USER_ID_LENGTH
from app.models.base import Base, CreatedAtMixin

JOB_STATES = ("queued", "running", "done", "failed", "dead")


class ExtractionJob(CreatedAtMixin, Base):
    """queued -> running -> done; a retryable failure goes back to queued with a later
    next_attempt_at, the last allowed attempt to dead; a permanent one (token cap, a request the
    endpoint refuses) to failed."""

    __tablename__ = "extraction_jobs"
    __table_args__ = (
        CheckConstraint("state IN ('queued', 'running', 'done', 'failed', 'dead')", name="state"),
        Index("uq_extraction_jobs_message_id", "user_id", "message_id", unique=True),
        ForeignKeyConstraint(
            ["user_id", "message_id"], ["messages.user_id", "messages.id"], ondelete="CASCADE"
        ),
        Index("idx_extraction_jobs_user_id", "user_id"),
        Index(
            "idx_extraction_jobs_due",
            "next_attempt_at",
            postgresql_where=text("state IN ('queued', 'running')"),
        ),
        Index(
            "idx_extraction_jobs_conversation",
            "conversation_id",
            "created_at",
            postgresql_where=text("state IN ('queued', 'running')"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH), nullable=False)
    # Batching key, copied from the message (whose foreign key already cascades).
    conversation_id: Mapped[uuid.UUID] = mapped_column(Uuid, nullable=False)
    message_id: Mapped[uuid.UUID] = mapped_column(Uuid, nullable=False)
    state: Mapped[str] = mapped_column(String(10), nullable=False, server_default="queued")
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    next_attempt_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    # The claim that holds the job (a fence: only that claim may finish it) and until when.
    claimed_by: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    tokens_used: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    outcome: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )


class ExtractionUsage(Base):
    """Tokens the endpoint reported for one user on one UTC day (`reserved`: calls in flight)."""

    __tablename__ = "extraction_usage"
    __table_args__ = (PrimaryKeyConstraint("user_id", "day"),)

    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH))
    day: Mapped[date] = mapped_column(Date)
    tokens: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    reserved: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    calls: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
