"""Shared field types and limits."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

MAX_CONTENT_CHARS = 32_000
MAX_METADATA_BYTES = 8_192


def _check_metadata(value: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(value, default=str)) > MAX_METADATA_BYTES:
        raise ValueError(f"metadata must serialise to at most {MAX_METADATA_BYTES} bytes")
    return value


# One rule for user ids everywhere (header, admin API, CLI, seed files).
USER_ID_PATTERN = re.compile(r"^[\x21-\x7e]{1,255}$")


def check_user_id(value: str) -> str:
    """1-255 printable ASCII characters, no spaces."""
    if not USER_ID_PATTERN.fullmatch(value):
        raise ValueError("must be 1-255 printable ASCII characters, no spaces")
    return value


def _check_text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Metadata = Annotated[dict[str, Any], AfterValidator(_check_metadata)]
Content = Annotated[
    str, Field(min_length=1, max_length=MAX_CONTENT_CHARS), AfterValidator(_check_text)
]
