"""Per-user API keys over the admin API (/v1/admin/keys): the same keys as `pgrecall keys`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, computed_field

from app.schemas.common import USER_ID_PATTERN_TEXT, check_user_id

Lifetime = Annotated[
    str,
    Field(
        max_length=7,
        pattern=r"^0*[1-9][0-9]*[mhdw]$",
        description="lifetime such as 90m, 12h, 30d or 2w; absent: never expires",
    ),
]


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: Annotated[
        str,
        Field(json_schema_extra={"pattern": USER_ID_PATTERN_TEXT}),
        AfterValidator(check_user_id),
    ]
    scope: Literal["read", "write"] = "write"
    expires_in: Lifetime | None = None
    agent_id: Annotated[
        str | None,
        Field(
            description="bind the key to one agent: its holder reads and writes as that agent "
            "only (docs/agents.md)",
            json_schema_extra={"pattern": USER_ID_PATTERN_TEXT},
        ),
        AfterValidator(lambda v: check_user_id(v) if v is not None else v),
    ] = None


class KeyOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    prefix: str = Field(description="the token's first characters, to recognise it")
    user_id: str
    scope: str
    agent_id: str | None = None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def state(self) -> Literal["active", "revoked", "expired"]:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= datetime.now(UTC):
            return "expired"
        return "active"


class KeyCreated(BaseModel):
    key: KeyOut
    token: str = Field(description="the token, shown this once; only its hash is stored")


class KeyPage(BaseModel):
    items: list[KeyOut]
    next_offset: int | None
