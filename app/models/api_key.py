"""API keys that carry a user: only a SHA-256 of the token is stored."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, Index, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.domain import USER_ID_LENGTH
from app.models.base import Base, CreatedAtMixin

KEY_SCOPES = ("read", "write")


class ApiKey(CreatedAtMixin, Base):
    __tablename__ = "api_keys"
    __table_args__ = (
        CheckConstraint("scope IN ('read', 'write')", name="scope"),
        # Authentication looks a key up by its hash, never by user.
        Index("uq_api_keys_key_hash", "key_hash", unique=True),
        Index("idx_api_keys_user_id", "user_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    key_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    # The token's first characters, shown by `keys list` so a key can be recognised.
    prefix: Mapped[str] = mapped_column(String(16), nullable=False)
    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH), nullable=False)
    scope: Mapped[str] = mapped_column(String(10), nullable=False)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # A key bound to one agent (migration 0019): its holder reads and writes as that agent.
    agent_id: Mapped[str | None] = mapped_column(String(USER_ID_LENGTH), nullable=True)
