"""Shared spaces over HTTP: the admin routes that manage them and their members' grants, and a
member's own view (docs/agents.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.domain import SPACE_ID_PATTERN_TEXT, SpaceAccess

SpaceId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=SPACE_ID_PATTERN_TEXT,
        description="lowercase letters, digits, _ . - (1-64 characters)",
    ),
]


class SpaceCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: SpaceId
    description: str = Field(default="", max_length=1000)


class SpaceOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: str
    description: str
    created_at: datetime


class MemberGrant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    access: SpaceAccess = Field(
        description="read: the member's queries may include the space; "
        "write: the member may also save memories into it"
    )


class MemberOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    space_id: str
    user_id: str
    access: str
    created_at: datetime


class SpaceList(BaseModel):
    spaces: list[SpaceOut]


class MemberList(BaseModel):
    members: list[MemberOut]
