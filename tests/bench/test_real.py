"""Pure checks of the real-conversation benchmark's pieces (no database, no model)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from app.db import positional
from bench.real import floor_sql, make_copy
from eval.datasets.locomo import Conversation, Turn
from tests.sql_scope import violations


def _conversation() -> Conversation:
    when = datetime(2023, 5, 8, tzinfo=UTC)
    turns = tuple(
        Turn(f"D1:{i}", speaker, text, 1, when, f"{speaker}: {text}")
        for i, (speaker, text) in enumerate(
            [("Caroline", "I ran 5 km with Melanie"), ("Melanie", "Caroline, 12 is a lot")]
        )
    )
    return Conversation("conv-x", "locomo-conv-x", turns, ())


def test_the_floor_statement_is_scoped_to_one_user() -> None:
    for exact, rescore in ((True, False), (True, True), (False, False)):
        sql, names = positional(floor_sql(exact, rescore))  # as floor_query sends it
        assert violations(sql) == []
        assert set(names) == {"user_id", "query", "limit", "k1", "b", "q", "model", "w", "names"}


def test_copies_rename_speakers_and_shift_numbers() -> None:
    conv = _conversation()
    first = make_copy(conv, 0, random.Random(1))
    assert first.text(conv.turns[0].content) == conv.turns[0].content
    copy = make_copy(conv, 3, random.Random(1))
    text = copy.text(conv.turns[1].content)
    assert "Caroline" not in text and "Melanie" not in text
    assert "15 is a lot" in text
    assert set(copy.names) == {"Caroline", "Melanie"}
    assert len(set(copy.names.values())) == 2
    # Deterministic by seed.
    assert make_copy(conv, 3, random.Random(1)).names == copy.names
