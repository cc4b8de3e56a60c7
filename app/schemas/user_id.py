"""One rule for user ids everywhere (header, admin API, CLI, seed files, keys).

Its own module, importing nothing but `re`, so `pgrecall keys` checks a user id without loading
the models (app.schemas.common imports them for the tag limits).
"""

from __future__ import annotations

import re

# Not starting with `space:` (RESERVED_PREFIX below; a lookahead: JSON Schema's patterns have it).
USER_ID_PATTERN_TEXT = r"^(?!space:)[\x21-\x7e]{1,255}$"
USER_ID_PATTERN = re.compile(USER_ID_PATTERN_TEXT)


# Shared spaces' rows carry `space:<id>` in place of a user id (app.domain.SPACE_PREFIX; kept
# literal here so this module imports nothing).
RESERVED_PREFIX = "space:"


def check_user_id(value: str) -> str:
    """1-255 printable ASCII characters, no spaces, not starting with `space:`."""
    if value.startswith(RESERVED_PREFIX):
        raise ValueError(f"must not start with {RESERVED_PREFIX!r} (it names shared spaces)")
    if not USER_ID_PATTERN.fullmatch(value):
        raise ValueError("must be 1-255 printable ASCII characters, no spaces")
    return value
