"""Key-addressable memories (/v1/store): what the LangGraph store adapter sends and gets back.

An item lives at (namespace, key) within the caller's user; the user comes from the credential,
never from the namespace. Namespace labels follow LangGraph's rule (non-empty, no '.'), so the
labels joined with '.' are a lossless address.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool

from app.schemas.common import (
    MAX_METADATA_KEY_CHARS,
    STORABLE_PATTERN,
    JsonValue,
    _check_json,
    check_storable,
    json_int,
)
from app.schemas.query import Query

MAX_LABELS = 10
MAX_LABEL_CHARS = 100
MAX_KEY_CHARS = 500
MAX_VALUE_BYTES = 16_384
MAX_FILTER_BYTES = 4_096
MAX_STORE_PAGE = 100
MAX_NAMESPACE_PAGE = 1_000
WILDCARD = "*"


def _check_label(value: str) -> str:
    check_storable(value)
    if "." in value:
        raise ValueError("must not contain '.'")
    return value


Label = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_LABEL_CHARS,
        json_schema_extra={"pattern": r"^[^.\u0000]*$"},
    ),
    AfterValidator(_check_label),
]
Namespace = Annotated[list[Label], Field(min_length=1, max_length=MAX_LABELS)]
NamespacePrefix = Annotated[list[Label], Field(max_length=MAX_LABELS)]
Key = Annotated[
    str,
    Field(min_length=1, max_length=MAX_KEY_CHARS, json_schema_extra={"pattern": STORABLE_PATTERN}),
    AfterValidator(check_storable),
]


def _bounded(limit: int) -> Any:
    def check(value: dict[str, Any]) -> dict[str, Any]:
        _check_json(value)
        if len(json.dumps(value, ensure_ascii=False).encode()) > limit:
            raise ValueError(f"must serialise to at most {limit} bytes")
        return value

    return check


# LangGraph's filter operators (InMemoryStore and PostgresStore support these six).
EQUALITY_OPERATORS = frozenset({"$eq", "$ne"})
ORDER_OPERATORS = frozenset({"$gt", "$gte", "$lt", "$lte"})
OPERATORS = EQUALITY_OPERATORS | ORDER_OPERATORS
# A TTL is in minutes, as LangGraph's; at most ten years.
MAX_TTL_MINUTES = 10 * 365 * 24 * 60.0


def _operators(value: dict[str, Any]) -> dict[str, Any]:
    """A field's condition is a value (an exact match) or an object of operators; an order
    operator compares with a number (numerically) or a string (as text)."""
    for name, wanted in value.items():
        if not isinstance(wanted, dict) or not any(k.startswith("$") for k in wanted):
            continue
        for op, operand in wanted.items():
            if op not in OPERATORS:
                raise ValueError(f"{name}: unknown operator {op!r} (known: {sorted(OPERATORS)})")
            if op in ORDER_OPERATORS and (
                isinstance(operand, bool) or not isinstance(operand, int | float | str)
            ):
                raise ValueError(f"{name}.{op}: must be a number or a string")
    return value


# Object keys as in metadata (app/schemas/common.py): storable, at most 200 characters.
_KEYS = {"propertyNames": {"pattern": STORABLE_PATTERN, "maxLength": MAX_METADATA_KEY_CHARS}}

Value = Annotated[
    dict[str, JsonValue],
    Field(
        description=f"the item, a JSON object of at most {MAX_VALUE_BYTES} bytes",
        json_schema_extra=_KEYS,
    ),
    AfterValidator(_bounded(MAX_VALUE_BYTES)),
]
Filter = Annotated[
    dict[str, JsonValue],
    Field(
        description=(
            "conditions on top-level fields of the value: a value (exact match; an object "
            "matches by JSON containment) or operators $eq, $ne, $gt, $gte, $lt, $lte"
        ),
        json_schema_extra=_KEYS,
    ),
    AfterValidator(_bounded(MAX_FILTER_BYTES)),
    AfterValidator(_operators),
]
Ttl = Annotated[
    float,
    Field(gt=0, le=MAX_TTL_MINUTES, description="minutes until the item expires (LangGraph TTL)"),
]


class StoreAddress(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace: Namespace
    key: Key


class StoreGet(StoreAddress):
    refresh_ttl: StrictBool = Field(
        default=False, description="restart the item's TTL on this read"
    )


class StorePut(StoreAddress):
    value: Value
    index: StrictBool = Field(
        default=True, description="false: stored but not found by meaning (no embedding search)"
    )
    ttl: Ttl | None = Field(default=None, description="minutes until expiry; none: never")


class StoreSearch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace_prefix: NamespacePrefix = Field(default_factory=list)
    query: Query | None = Field(default=None, description="ranks by meaning when given")
    filter: Filter | None = None
    limit: json_int(ge=1, le=MAX_STORE_PAGE) = 10  # type: ignore[valid-type]
    offset: json_int(ge=0, le=10_000) = 0  # type: ignore[valid-type]
    refresh_ttl: StrictBool = Field(default=False, description="restart the found items' TTLs")


class StoreNamespaces(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prefix: NamespacePrefix = Field(default_factory=list, description="'*' matches any label")
    suffix: NamespacePrefix = Field(default_factory=list, description="'*' matches any label")
    max_depth: json_int(ge=1, le=MAX_LABELS) | None = None  # type: ignore[valid-type]
    limit: json_int(ge=1, le=MAX_NAMESPACE_PAGE) = 100  # type: ignore[valid-type]
    offset: json_int(ge=0, le=100_000) = 0  # type: ignore[valid-type]


class StoreItemOut(BaseModel):
    id: uuid.UUID = Field(description="the memory's id (query_memory and forget_memory use it)")
    namespace: list[str]
    key: str
    value: dict[str, Any]
    type: str = Field(description="the memory type the namespace maps to")
    created_at: datetime
    updated_at: datetime
    score: float | None = Field(default=None, description="cosine similarity to the query")
    expires_at: datetime | None = Field(default=None, description="when the TTL ends")
    ttl: float | None = Field(default=None, description="the TTL in minutes, refreshed on reads")


class StoreItemPage(BaseModel):
    items: list[StoreItemOut]


class StoreDeleted(BaseModel):
    deleted: bool = Field(description="false when there was no live item at the address")


class StoreSwept(BaseModel):
    deleted: int = Field(description="expired items of the caller deleted by this sweep")


class NamespaceList(BaseModel):
    namespaces: list[list[str]]
