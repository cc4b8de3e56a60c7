"""Shared field types and limits: one validation rule per kind of value, applied at the edge.

Every text a caller sends is checked once, here, for what Postgres can store: no NUL (text and
jsonb cannot hold it) and no lone surrogates (not encodable as UTF-8). Each rule is written once
as a Python check and once as the JSON-Schema pattern the OpenAPI document shows; a test pins
the two together (tests/schemas/test_common.py).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Union

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field
from typing_extensions import TypeAliasType

from app.domain import MAX_TAG_CHARS, MAX_TAGS, TAG_PATTERN_TEXT

# Re-exported: the user-id rule lives in app/schemas/user_id.py (no model imports).
from app.schemas.user_id import USER_ID_PATTERN as USER_ID_PATTERN
from app.schemas.user_id import USER_ID_PATTERN_TEXT as USER_ID_PATTERN_TEXT
from app.schemas.user_id import check_user_id as check_user_id

MAX_CONTENT_CHARS = 32_000
MAX_METADATA_BYTES = 8_192
MAX_METADATA_KEY_CHARS = 200
MAX_BIGINT = 2**63 - 1

# What counts as blank: ASCII and Unicode space separators (escaped for both Python and the
# ECMA-262 regexes of JSON Schema).
_BLANK_CLASS = r"\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
STORABLE_PATTERN = r"^[^\u0000]*$"
# Nothing but blanks (or nothing at all).
BLANK_PATTERN = rf"^[{_BLANK_CLASS}]*$"
_NOT_BLANK_CHAR = re.compile(rf"[^{_BLANK_CLASS}]")
# A non-blank text in JSON Schema: storable, and not only blanks. (`not`, where a second
# pattern in `allOf` searching for a non-blank character said the same: schemathesis builds its
# longer-than-maxLength case of a text with such a pattern one character at a time, about 300 s
# of CPU for one 32,000-character field; tests/test_schemathesis.py's main run took 388 s
# alone on 2 cores, now 141 s: docs/hardening.md.)
NON_BLANK_SCHEMA: dict[str, Any] = {
    "pattern": STORABLE_PATTERN,
    "not": {"pattern": BLANK_PATTERN},
}


def check_storable(value: str) -> str:
    """Text Postgres can store: no NUL, valid Unicode (no lone surrogates)."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


def check_non_blank(value: str) -> str:
    """Storable text with at least one character that is not white space."""
    check_storable(value)
    if not _NOT_BLANK_CHAR.search(value):
        raise ValueError("must not be blank")
    return value


def check_timestamp(value: datetime) -> datetime:
    """An aware time that stays within the representable range once converted to UTC."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range (years 0001-9999 in UTC)") from None


def reject_loose_json(value: Any) -> Any:
    """JSON numbers and times arrive as themselves: no booleans for numbers, no strings for
    numbers, no numbers for times (pydantic's lax mode would convert them)."""
    if isinstance(value, bool | str | bytes):
        raise ValueError("must be a JSON number")
    return value


def _time_as_text(value: Any) -> Any:
    if isinstance(value, bool | int | float):
        raise ValueError("must be an ISO 8601 string with a time zone")
    return value


def storable_text(max_length: int) -> Any:
    """A text field of at most `max_length` characters that Postgres can store."""
    return Annotated[
        str,
        Field(max_length=max_length, json_schema_extra={"pattern": STORABLE_PATTERN}),
        AfterValidator(check_storable),
    ]


def _check_json(value: Any, depth: int = 0) -> None:
    if depth > 16:
        raise ValueError("must not nest deeper than 16 levels")
    if isinstance(value, str):
        check_storable(value)
    elif isinstance(value, list):
        for item in value:
            _check_json(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_storable(key)
            if len(key) > MAX_METADATA_KEY_CHARS:
                raise ValueError(f"keys must be at most {MAX_METADATA_KEY_CHARS} characters")
            _check_json(item, depth + 1)


def _check_metadata(value: dict[str, Any]) -> dict[str, Any]:
    _check_json(value)
    if len(json.dumps(value, ensure_ascii=False).encode()) > MAX_METADATA_BYTES:
        raise ValueError(f"must serialise to at most {MAX_METADATA_BYTES} bytes")
    return value


_KEYS = {"propertyNames": {"pattern": STORABLE_PATTERN, "maxLength": MAX_METADATA_KEY_CHARS}}
_JsonText = Annotated[str, Field(json_schema_extra={"pattern": STORABLE_PATTERN})]
_JsonNumber = Annotated[float, Field(allow_inf_nan=False)]
JsonValue = TypeAliasType(
    "JsonValue",
    Union[  # noqa: UP007 (a recursive alias needs the Union form)
        _JsonText,
        int,
        _JsonNumber,
        bool,
        list["JsonValue"],
        Annotated[dict[str, "JsonValue"], Field(json_schema_extra=_KEYS)],
        None,
    ],
)

Metadata = Annotated[
    dict[str, JsonValue],
    Field(
        description=f"free-form JSON object, at most {MAX_METADATA_BYTES} bytes",
        json_schema_extra=_KEYS,
    ),
    AfterValidator(_check_metadata),
]
Content = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CONTENT_CHARS,
        json_schema_extra=NON_BLANK_SCHEMA,
    ),
    AfterValidator(check_non_blank),
]
Timestamp = Annotated[
    AwareDatetime,
    BeforeValidator(_time_as_text),
    Field(description="ISO 8601 with a time zone, within years 0001-9999 in UTC"),
    AfterValidator(check_timestamp),
]
Seq = Annotated[int, Field(ge=0, le=MAX_BIGINT)]


# Numbers in JSON bodies: 5 and 5.0 are integers (as JSON Schema says), "5" and true are not.
# The bounds go inside, before the check, so that they stay in the JSON schema.
def json_int(*, ge: int, le: int) -> Any:
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(reject_loose_json)]


def json_float(*, ge: float, le: float) -> Any:
    return Annotated[
        float, Field(ge=ge, le=le, allow_inf_nan=False), BeforeValidator(reject_loose_json)
    ]


def _check_tags(values: list[str]) -> list[str]:
    if len(set(values)) != len(values):
        raise ValueError("must not repeat tags")
    return values


# One rule for tags everywhere (save_memory, admin create, seed files, imports, query filters).
Tag = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_TAG_CHARS,
        pattern=TAG_PATTERN_TEXT,
        description=f"lowercase letters, digits and _ - . : (1-{MAX_TAG_CHARS} characters)",
    ),
]
Tags = Annotated[
    list[Tag],
    Field(max_length=MAX_TAGS, json_schema_extra={"uniqueItems": True}),
    AfterValidator(_check_tags),
]
