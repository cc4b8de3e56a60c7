"""The text rules as Python checks and as the JSON-Schema patterns the OpenAPI shows agree."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from app.schemas.common import (
    BLANK_PATTERN,
    NON_BLANK_SCHEMA,
    STORABLE_PATTERN,
    check_non_blank,
    check_storable,
)

# Texts rich in the characters the rules are about: NUL, ASCII and Unicode spaces, letters.
_TRICKY = st.sampled_from(["\x00", " ", "\t", "\n", "\u3000", "\u00a0", "\ufeff", "\x1c", "a", "é"])
texts = st.one_of(st.text(), st.lists(_TRICKY, max_size=6).map("".join))


def _accepts(check, value: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        check(value)
    except ValueError:
        return False
    return True


@given(texts)
def test_storable_check_matches_its_pattern(value: str) -> None:
    assert _accepts(check_storable, value) == bool(re.fullmatch(STORABLE_PATTERN, value))


@given(texts)
def test_non_blank_check_matches_its_patterns(value: str) -> None:
    # JSON Schema: `pattern` (anchored, storable) and `not` a text of blanks only.
    assert NON_BLANK_SCHEMA["not"] == {"pattern": BLANK_PATTERN}
    by_schema = bool(re.fullmatch(NON_BLANK_SCHEMA["pattern"], value)) and not re.fullmatch(
        BLANK_PATTERN, value
    )
    assert _accepts(check_non_blank, value) == by_schema


def test_lone_surrogates_are_refused_although_no_pattern_can_say_so() -> None:
    assert not _accepts(check_storable, "a\ud800")
    assert not _accepts(check_non_blank, "\udfff")
    assert _accepts(check_storable, "emoji \U0001f600 is a pair, not a surrogate")
