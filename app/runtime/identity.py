"""Checks on who a call is for that every door makes the same way."""

from __future__ import annotations

from app.errors import ValidationFailedError
from app.schemas.common import check_user_id


def validate_user_id(value: str, field: str = "X-User-Id") -> str:
    """User ids are 1-255 printable ASCII characters without spaces."""
    try:
        return check_user_id(value)
    except ValueError as exc:
        raise ValidationFailedError(f"header.{field}: {exc}", field=f"header.{field}") from None
