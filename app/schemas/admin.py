"""Admin contracts: memory rows (HTTP and seed files), updates, listings."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from app.domain import MemoryType
from app.schemas.common import (
    USER_ID_PATTERN_TEXT,
    Content,
    Metadata,
    Tags,
    Timestamp,
    check_user_id,
    json_float,
    storable_text,
)

# The same rule as app.runtime.identity.validate_user_id (tests/admin pin the two together);
# repeated here because schemas sit below the API layer and must not import from it.
MAX_BULK_MEMORIES = 1000
MAX_SOURCE_CHARS = 500


UserId = Annotated[
    str, Field(json_schema_extra={"pattern": USER_ID_PATTERN_TEXT}), AfterValidator(check_user_id)
]
Importance = json_float(ge=0.0, le=1.0)
Source = storable_text(MAX_SOURCE_CHARS)


class AdminMemoryCreate(BaseModel):
    """One curated memory: an admin API item and one row of a seed file."""

    model_config = ConfigDict(extra="forbid")
    user_id: UserId
    content: Content
    type: MemoryType
    importance: Importance = 0.5
    created_at: Timestamp | None = None
    expires_at: Timestamp | None = Field(
        default=None, description="at or before created_at: stored, but expired from the start"
    )
    source: Source | None = None
    metadata: Metadata = Field(default_factory=dict)
    tags: Tags = Field(default_factory=list, description="short labels query_memory can filter by")


class AdminMemoryCreateOne(AdminMemoryCreate):
    """One memory through the admin API; `supersedes` makes it replace a memory of the user."""

    supersedes: uuid.UUID | None = Field(
        default=None,
        description="id of the user's valid memory this one replaces: it is closed (valid_to = "
        "created_at, default now) and linked as the new one's earlier version",
    )


class AdminMemoryBulkCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[AdminMemoryCreate] = Field(min_length=1, max_length=MAX_BULK_MEMORIES)


class AdminMemoryUpdate(BaseModel):
    """Fields to change; a new content is re-embedded and re-indexed. `expires_at: null` clears."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})
    # Omit a field to keep it; content, type and importance cannot be null (not in the schema).
    content: Content | SkipJsonSchema[None] = None
    type: MemoryType | SkipJsonSchema[None] = None
    importance: Importance | SkipJsonSchema[None] = None
    expires_at: Timestamp | None = None
    tags: Tags | SkipJsonSchema[None] = None

    @model_validator(mode="after")
    def _something_to_change(self) -> AdminMemoryUpdate:
        if not self.model_fields_set:
            raise ValueError("give at least one of content, type, importance, expires_at, tags")
        for name in ("content", "type", "importance", "tags"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} must not be null")
        return self


class AdminMemoryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    user_id: str
    content: str
    type: str
    importance: float
    source: str | None
    source_message_id: uuid.UUID | None
    embedding_model: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    deleted_at: datetime | None
    metadata: dict[str, object] = Field(validation_alias="metadata_")
    valid_from: datetime
    valid_to: datetime | None
    supersedes_id: uuid.UUID | None
    tags: list[str]
    last_retrieved_at: datetime | None = Field(description="when query_memory last returned it")
    times_retrieved: int = Field(description="how many answers of query_memory returned it")
    evicted_at: datetime | None = Field(
        description="when the per-user cap soft-deleted it (restoring clears it)"
    )


class AdminMemoryHistory(BaseModel):
    """All versions of one memory (deleted ones too), oldest first."""

    id: uuid.UUID
    current: uuid.UUID | None
    versions: list[AdminMemoryOut]


class DuplicateOut(BaseModel):
    index: int = Field(description="position of the skipped item in the request")
    id: uuid.UUID = Field(description="the stored memory with the same content")


class AdminBulkResult(BaseModel):
    items: list[AdminMemoryOut]
    duplicates: list[DuplicateOut]


class AdminMemoryPage(BaseModel):
    items: list[AdminMemoryOut]
    total: int
    next_offset: int | None
