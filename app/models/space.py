"""Shared spaces and their members' grants (migration 0019_memory_scopes, docs/agents.md).

A space's memories are memory_items rows whose user_id is the space's owner key
(`space:<id>`, app.domain.space_owner); these two tables say who may read or write them.
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint, ForeignKey, Index, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app.domain import SPACE_ACCESS, SPACE_ID_LENGTH, USER_ID_LENGTH
from app.models.base import Base, CreatedAtMixin


class Space(CreatedAtMixin, Base):
    __tablename__ = "spaces"
    __table_args__ = (CheckConstraint("id ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'", name="id"),)

    id: Mapped[str] = mapped_column(String(SPACE_ID_LENGTH), primary_key=True)
    description: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("''"))


class SpaceMember(CreatedAtMixin, Base):
    __tablename__ = "space_members"
    __table_args__ = (
        CheckConstraint(f"access IN ({', '.join(repr(a) for a in SPACE_ACCESS)})", name="access"),
        Index("idx_space_members_user_id", "user_id"),
    )

    space_id: Mapped[str] = mapped_column(
        String(SPACE_ID_LENGTH), ForeignKey("spaces.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(String(USER_ID_LENGTH), primary_key=True)
    access: Mapped[str] = mapped_column(String(5), nullable=False)
