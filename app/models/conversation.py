"""Conversations and their messages."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    SmallInteger,
    String,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from app.domain import USER_ID_LENGTH
from app.models.base import (
    COVERING_INDEXES,
    EMBEDDING_DIMENSION,
    Base,
    CreatedAtMixin,
    HalfVec,
    ScopedMixin,
    search_indexes,
)


# Primary keys: the tables' keys are (user_id, id) in the database (migration
# 0010_distributable: Citus needs the distribution column in every key); the ORM identifies rows
# by their uuid alone, which is unique on its own.
class Conversation(ScopedMixin, CreatedAtMixin, Base):
    __tablename__ = "conversations"
    __table_args__ = (
        Index("idx_conversations_user_id", "user_id"),
        Index("idx_conversations_updated_at", text("updated_at DESC")),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH), nullable=False)
    title: Mapped[str | None] = mapped_column(String(500), nullable=True)
    # The session state's goal (set_session_goal); Redis keeps a copy (migration 0014).
    goal: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    # LLM extraction for this conversation: True/False override the service default, None
    # follows it (PATCH /v1/conversations/{id}).
    extraction: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # The rolling summary the extraction worker keeps, and the last message seq it covers.
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)
    summary_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    summary_updated_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )


class Message(ScopedMixin, CreatedAtMixin, Base):
    __tablename__ = "messages"
    __table_args__ = (
        CheckConstraint("role IN ('user', 'assistant', 'system')", name="role"),
        ForeignKeyConstraint(
            ["user_id", "conversation_id"],
            ["conversations.user_id", "conversations.id"],
            ondelete="CASCADE",
        ),
        Index("idx_messages_user_conversation_seq", "user_id", "conversation_id", "seq"),
        Index("idx_messages_correlation_id", "correlation_id"),
        *search_indexes("messages"),
        # The exact path's index-only scan of a user's vectors (app/vectors.py).
        *(
            [
                Index(
                    "idx_messages_user_vectors",
                    "user_id",
                    "embedding_model",
                    # the scope columns: the scope policy reads them (migration 0019)
                    postgresql_include=["id", "embedding", "agent_id", "run_id"],
                    postgresql_where=text("embedding IS NOT NULL"),
                )
            ]
            if COVERING_INDEXES
            else []
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    conversation_id: Mapped[uuid.UUID] = mapped_column(Uuid, nullable=False)
    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH), nullable=False)
    role: Mapped[str] = mapped_column(String(20), nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    embedding: Mapped[Any] = mapped_column(HalfVec(EMBEDDING_DIMENSION), nullable=True)
    embedding_model: Mapped[str | None] = mapped_column(String(100), nullable=True)
    correlation_id: Mapped[uuid.UUID] = mapped_column(Uuid, nullable=False)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), nullable=False)
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )


class MessagePassage(Base):
    """A sentence of a multi-sentence message, with its own vector (migration 0009_passages)."""

    __tablename__ = "message_passages"
    __table_args__ = (
        Index("idx_message_passages_user_message", "user_id", "message_id"),
        *(
            [
                Index(
                    "idx_message_passages_user_vectors",
                    "user_id",
                    "embedding_model",
                    postgresql_include=["message_id", "embedding"],
                )
            ]
            if COVERING_INDEXES
            else []
        ),
        ForeignKeyConstraint(
            ["user_id", "message_id"], ["messages.user_id", "messages.id"], ondelete="CASCADE"
        ),
    )

    message_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    ord: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH), nullable=False)
    embedding: Mapped[Any] = mapped_column(HalfVec(EMBEDDING_DIMENSION), nullable=False)
    embedding_model: Mapped[str] = mapped_column(String(100), nullable=False)
